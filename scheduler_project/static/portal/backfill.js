// The backfill progress page: create each job's runs chunk by chunk (one POST
// per chunk of at most 500) and show how far it got, until done.
(function () {
  "use strict";
  var form = document.getElementById("backfill-form");
  if (!form) { return; }
  var url = form.getAttribute("data-step-url");
  var csrf = form.querySelector("[name=csrfmiddlewaretoken]").value;
  var note = form.querySelector("[name=note]").value;
  var ignoreWindows = form.querySelector("[name=ignore_windows]").value;
  var items = Array.prototype.slice.call(document.querySelectorAll("[data-backfill-job]"));
  var done = document.getElementById("backfill-done");
  var created = 0;

  function step(item, cursor, remaining, made) {
    var text = item.querySelector(".portal-backfill-text");
    var bar = item.querySelector("progress");
    var body = new URLSearchParams({ job: item.getAttribute("data-backfill-job"), cursor: cursor, end: item.getAttribute("data-end"), remaining: String(remaining), note: note, ignore_windows: ignoreWindows });
    return fetch(url, { method: "POST", credentials: "same-origin", headers: { "X-CSRFToken": csrf }, body: body })
      .then(function (r) { return r.json().then(function (data) { return { ok: r.ok, data: data }; }); })
      .then(function (res) {
        if (!res.ok) { text.textContent = "stopped: " + (res.data.error || "error"); return made; }
        made += res.data.created;
        bar.value = made;
        text.textContent = (res.data.done ? "done: " : "working: ") + made + " of " + item.getAttribute("data-total") + " runs created";
        return res.data.done ? made : step(item, res.data.cursor, res.data.remaining, made);
      });
  }

  items.reduce(function (chain, item) {
    return chain.then(function () {
      return step(item, item.getAttribute("data-start"), Number(item.getAttribute("data-total")), 0).then(function (n) { created += n; });
    });
  }, Promise.resolve()).then(function () {
    done.textContent = "Backfill done: " + created + " run(s) created.";
    // The heading and the tab said "in progress" until now.
    var heading = document.querySelector("#content h1");
    if (heading) { heading.textContent = "Backfill done"; }
    document.title = document.title.replace("Backfill in progress", "Backfill done");
    document.body.setAttribute("data-backfill", "done");
  });
})();
