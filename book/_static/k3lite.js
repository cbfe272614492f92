/* k3lite site script. Output figures are drawn with 10 pt labels on a 100 dpi canvas; shrinking one
   below 3/4 of its drawn width would print its labels under 10 px, so each image keeps at least that
   width and its output box scrolls sideways instead (see k3lite.css). */
(function () {
  "use strict";
  var MIN_SCALE = 0.75;
  function keepReadable(img) {
    if (img.naturalWidth > 0) {
      img.style.minWidth = Math.round(MIN_SCALE * img.naturalWidth) + "px";
    }
  }
  function start() {
    document.querySelectorAll(".bd-content div.cell_output img").forEach(function (img) {
      if (img.complete) { keepReadable(img); } else { img.addEventListener("load", function () { keepReadable(img); }); }
    });
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
})();
