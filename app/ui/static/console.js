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
// The create form: only the fields of the chosen target and trigger, and the next fire times
// of the trigger as it is typed (the form's own "Preview fire times" button does the same
// without this script).
(function () {
  "use strict";
  var form = document.getElementById("create-form");
  if (!form) return;
  var target = form.elements.namedItem("target_kind");
  var trigger = form.elements.namedItem("trigger_type");
  function show() {
    form.querySelectorAll(".group[data-target]").forEach(function (group) {
      group.hidden = group.getAttribute("data-target") !== target.value;
    });
    form.querySelectorAll(".group[data-trigger]").forEach(function (group) {
      group.hidden = group.getAttribute("data-trigger").split(" ").indexOf(trigger.value) < 0;
    });
  }
  target.addEventListener("change", show);
  trigger.addEventListener("change", show);
  show();
  var preview = document.getElementById("preview");
  var url = form.getAttribute("data-preview");
  if (!preview || !url || !window.fetch) return;
  var names = ["trigger_type", "at", "delay_seconds", "expression", "timezone", "every_seconds", "start_at"];
  var timer = null;
  var asked = 0;
  function refresh() {
    var query = new URLSearchParams();
    names.forEach(function (name) { query.set(name, form.elements.namedItem(name).value); });
    var mine = ++asked;
    fetch(url + (url.indexOf("?") < 0 ? "?" : "&") + query.toString(), { credentials: "same-origin", cache: "no-store" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null || mine !== asked) return;  // a later one is on its way
        var found = new DOMParser().parseFromString(html, "text/html").body;
        preview.replaceChildren.apply(preview, Array.from(found.childNodes));
      })
      .catch(function () {});
  }
  names.forEach(function (name) {
    form.elements.namedItem(name).addEventListener("input", function () {
      window.clearTimeout(timer);
      timer = window.setTimeout(refresh, 250);
    });
  });
})();
