// The little the pages do in the browser: the theme toggle and "select all" boxes.
// Everything else is plain links and forms, served and checked by the console.
(function () {
  "use strict";
  function current() {
    var set = document.documentElement.getAttribute("data-theme");
    if (set) { return set; }
    return window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  }
  var toggle = document.getElementById("theme-toggle");
  if (toggle) {
    toggle.setAttribute("aria-pressed", current() === "dark" ? "true" : "false");
    toggle.addEventListener("click", function () {
      var next = current() === "dark" ? "light" : "dark";
      document.documentElement.setAttribute("data-theme", next);
      toggle.setAttribute("aria-pressed", next === "dark" ? "true" : "false");
      try { window.localStorage.setItem("rc-theme", next); } catch (e) { /* private mode */ }
    });
  }
  document.querySelectorAll("[data-select-all]").forEach(function (box) {
    box.addEventListener("change", function () {
      var name = box.getAttribute("data-select-all");
      box.closest("form").querySelectorAll('input[type=checkbox][name="' + name + '"]').forEach(function (b) {
        b.checked = box.checked;
      });
    });
  });
})();
