// Applies the theme chosen before (light or dark), else the system's, before the page
// paints; the toggle in the header switches and remembers it.
(function () {
  "use strict";
  var saved = null;
  try { saved = window.localStorage.getItem("rc-theme"); } catch (e) { saved = null; }
  if (saved === "light" || saved === "dark") {
    document.documentElement.setAttribute("data-theme", saved);
  }
})();
