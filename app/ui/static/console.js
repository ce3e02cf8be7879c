// Niceties only: every page reads, and every form posts, without this script.
(function () {
  "use strict";
  // "Select all" for the dead letters on this page.
  document.querySelectorAll("input.select-all").forEach(function (all) {
    all.hidden = false;
    all.addEventListener("change", function () {
      document.querySelectorAll('input[name="occurrence_id"]').forEach(function (box) {
        box.checked = all.checked;
      });
    });
  });
  // A second look before a change that cannot be undone.
  document.querySelectorAll("button[data-confirm]").forEach(function (button) {
    button.addEventListener("click", function (event) {
      if (!window.confirm(button.getAttribute("data-confirm"))) event.preventDefault();
    });
  });
})();
