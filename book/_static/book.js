// A search hit opens its page with ?highlight=<words>; Sphinx marks the words (span.highlighted) but
// leaves the reader at the top of the page. Scroll to the first match in the text instead.
(function () {
  if (!new URLSearchParams(window.location.search).has("highlight") || window.location.hash) { return; }
  function toMatch(tries) {
    var hit = document.querySelector("article span.highlighted");
    if (hit) { hit.scrollIntoView({block: "center"}); }
    else if (tries > 0) { setTimeout(function () { toMatch(tries - 1); }, 100); }
  }
  window.addEventListener("load", function () { toMatch(10); });
})();
