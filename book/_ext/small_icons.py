"""The theme's icons without its 1.5 MB icon script.

pydata-sphinx-theme loads Font Awesome's whole icon set as a script (``_static/scripts/fontawesome.js``,
about 1.5 MB, on every page) to draw the dozen icons of the page's buttons. After the build, this
extension finds the icons the pages use, takes each one's outline from that same script, and writes in
its place a small script that draws them as CSS masks in the text's colour. The pages keep their icons;
each loses about 1.5 MB. The theme's style sheet loses the glyph rules of the icon font, and admonitions
draw their icons as masks too, so the icon font is never downloaded. Font Awesome Free icons are CC BY 4.0 (https://fontawesome.com/license/free).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import quote

ICON_SCRIPT = Path("_static") / "scripts" / "fontawesome.js"
THEME_CSS = Path("_static") / "styles" / "pydata-sphinx-theme.css"
ADMONITION_CSS = Path("_static") / "admonition-icons.css"
# The theme's style sheet gives each of Font Awesome's ~1,900 icons its glyph (86 KB); with the icons drawn
# as masks no glyph is ever shown, so those rules go.
GLYPH_RULES = re.compile(r'(?:\.fa-[\w-]+:before,?)+\{content:"[^"]*"\}')
# Font Awesome's class names for its three families, long and short forms.
FAMILIES = {"fa-brands": "fab", "fa-solid": "fas", "fa-regular": "far", "fab": "fab", "fas": "fas", "far": "far"}
ICON_CLASSES = re.compile(r'class="([^"]*\bfa-[^"]*)"')
NOT_ICONS = {"fa-lg", "fa-sm", "fa-xs", "fa-fw", "fa-2x", "fa-3x", "fa-spin", "fa-pulse", "fa-brands", "fa-solid",
             "fa-regular"}


def icon_set(script: str) -> dict[tuple[str, str], tuple[int, int, str]]:
    """{(family, name or alias): (width, height, path)} from Font Awesome's script.

    Each family is a JavaScript object literal ``p={name:[w,h,[aliases],"unicode","path"], ...}``
    registered by ``d("fab", p)``; the family of an icon is that of the next registration after it.
    """
    registrations = [(m.start(), m.group(1)) for m in re.finditer(r'\bd\("(fab|far|fas)",\w+\)', script)]
    entry = re.compile(r'(?:"([\w-]+)"|([\w-]+)):\[(\d+),(\d+),\[([^\]]*)\],"[0-9a-f]*","([^"]+)"\]')
    icons = {}
    for m in entry.finditer(script):
        family = next((f for at, f in registrations if at > m.start()), None)
        if family is None:
            continue
        name = m.group(1) or m.group(2)
        shape = (int(m.group(3)), int(m.group(4)), m.group(6))
        aliases = re.findall(r'"([\w-]+)"', m.group(5))
        for n in [name, *aliases]:
            icons.setdefault((family, n), shape)
    return icons


def used_icons(html_dir: Path) -> set[tuple[str, str, str]]:
    """(prefix class, family, icon name) of every Font Awesome icon written in the built pages."""
    found = set()
    for page in html_dir.rglob("*.html"):
        for classes in ICON_CLASSES.findall(page.read_text(encoding="utf-8")):
            words = classes.split()
            prefixes = [w for w in words if w in FAMILIES]
            names = [w[3:] for w in words if w.startswith("fa-") and w not in NOT_ICONS]
            for prefix in prefixes or ["fas"]:
                for name in names:
                    found.add((prefix, FAMILIES[prefix], name))
    return found


# The icon the theme draws after each kind of admonition's title (pydata-sphinx-theme's --pst-icon-admonition-*).
ADMONITION_ICONS = {"": "bell", "note": "circle-info", "attention": "circle-exclamation",
                    "caution": "triangle-exclamation", "warning": "triangle-exclamation",
                    "danger": "triangle-exclamation", "error": "circle-xmark", "hint": "lightbulb",
                    "tip": "lightbulb", "important": "circle-exclamation", "seealso": "share", "todo": "pencil"}


def _mask_url(shape) -> str:
    width, height, path = shape
    svg = f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}'><path d='{path}'/></svg>"
    return f'url("data:image/svg+xml,{quote(svg, safe=" =:/.,-")}")'


def icon_css(used, icons) -> str:
    rules = [".sl-icon{display:inline-block;height:1em;vertical-align:-.125em;background-color:currentColor;"
             "-webkit-mask:var(--sl-icon) center/contain no-repeat;mask:var(--sl-icon) center/contain no-repeat}"]
    for prefix, family, name in sorted(used):
        shape = icons.get((family, name))
        if shape is None:
            continue
        rules.append(f'.sl-icon.{prefix}.fa-{name}{{width:{shape[0] / shape[1]:.3f}em;--sl-icon:{_mask_url(shape)}}}')
    return "".join(rules)


def admonition_css(icons) -> str:
    """Admonitions: the theme draws a glyph of the icon font after each title; a mask of the same icon
    instead. A style sheet of its own, linked from every page: injected by a script it would come too late,
    after the browser had started downloading the font for the glyph."""
    after = "div.admonition{kind}>.admonition-title:after"
    rules = [after.format(kind="") + '{content:""!important;font:inherit!important;background-color:currentColor;'
             "-webkit-mask:var(--sl-icon) center/contain no-repeat;mask:var(--sl-icon) center/contain no-repeat}"]
    for kind, name in ADMONITION_ICONS.items():
        shape = icons.get(("fas", name))
        if shape is not None:
            rules.append(after.format(kind=f".{kind}" if kind else "") + f"{{--sl-icon:{_mask_url(shape)}}}")
    return "\n".join(rules) + "\n"


def write_small_icon_script(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    target = out / ICON_SCRIPT
    import pydata_sphinx_theme

    theme = Path(pydata_sphinx_theme.__file__).parent / "theme" / "pydata_sphinx_theme"
    source = theme / "static" / "scripts" / "fontawesome.js"
    icons = icon_set(source.read_text(encoding="utf-8"))
    css = icon_css(used_icons(out), icons)
    (out / ADMONITION_CSS).write_text(admonition_css(icons), encoding="utf-8")
    # Every Font Awesome <i> or <span> gets the class that paints its mask; the rules above give each its
    # outline.
    target.write_text(
        "(function () {\n"
        f"  var style = document.createElement('style');\n  style.textContent = {json.dumps(css)};\n"
        "  document.head.appendChild(style);\n"
        "  function mark() {\n"
        "    document.querySelectorAll('i[class*=\"fa-\"], span[class*=\"fa-\"]').forEach(function (i) {\n"
        "      i.classList.add('sl-icon');\n    });\n  }\n"
        "  if (document.readyState === 'loading') { document.addEventListener('DOMContentLoaded', mark); }\n"
        "  else { mark(); }\n"
        "})();\n", encoding="utf-8")


def drop_glyph_rules(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    css = Path(app.outdir) / THEME_CSS
    if css.exists():
        css.write_text(GLYPH_RULES.sub("", css.read_text(encoding="utf-8")), encoding="utf-8")


def setup(app):
    app.add_css_file(ADMONITION_CSS.name)
    app.connect("build-finished", drop_glyph_rules)
    app.connect("build-finished", write_small_icon_script)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
