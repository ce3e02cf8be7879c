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
// The header's numbers, read again every few seconds while the page is shown.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.fetch) return;
  var base = live.getAttribute("data-base") || "";
  window.setInterval(function () {
    if (document.hidden) return;
    fetch(base + "/ui/live", { credentials: "same-origin", cache: "no-store" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null) return;
        var next = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        if (next) live.replaceChildren.apply(live, Array.from(next.childNodes));
      })
      .catch(function () {});
  }, 5000);
})();
