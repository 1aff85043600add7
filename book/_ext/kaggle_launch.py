"""Adds an "Open in Kaggle" entry next to the theme's Colab launch button.

The Kaggle link is derived from the Colab one, so the repository address stays
written only in _config.yml.
"""

COLAB_MARK = "/github/"
KAGGLE_PREFIX = "https://www.kaggle.com/kernels/welcome?src=https://github.com/"


def add_kaggle_button(app, pagename, templatename, context, doctree):
    for group in context.get("header_buttons", []):
        if group.get("label") != "launch-buttons":
            continue
        for button in list(group["buttons"]):
            if button.get("text") == "Colab":
                blob_path = button["url"].split(COLAB_MARK, 1)[1]  # org/repo/blob/branch/path.ipynb
                group["buttons"].append({
                    "type": "link",
                    "text": "Kaggle",
                    "tooltip": "Open in Kaggle",
                    "icon": "_static/kaggle.svg",
                    "url": KAGGLE_PREFIX + blob_path,
                })
                return


def setup(app):
    # After sphinx-book-theme has made its launch buttons (priority 501).
    app.connect("html-page-context", add_kaggle_button, priority=502)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
