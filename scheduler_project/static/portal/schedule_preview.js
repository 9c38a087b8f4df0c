// The job form's schedule preview: as the operator types a cron expression, an
// every schedule's period, a time zone or the bounds, ask the portal for the
// next runs (in the zone and in UTC, DST changes flagged) and show them, or the
// error saying how to fix the input.
(function () {
  "use strict";
  function ready(fn) { if (document.readyState !== "loading") { fn(); } else { document.addEventListener("DOMContentLoaded", fn); } }
  ready(function () {
    var box = document.getElementById("schedule-preview");
    var expr = document.getElementById("id_cron_expr");
    var zone = document.getElementById("id_time_zone");
    if (!box || !expr || !zone) { return; }
    var kind = document.getElementById("id_schedule_kind");
    var period = document.getElementById("id_every_seconds");
    // The bounds: the admin's date and time boxes of start_at and end_at.
    var bounds = ["start_at_0", "start_at_1", "end_at_0", "end_at_1"].map(function (name) {
      return [name, document.getElementById("id_" + name)];
    }).filter(function (pair) { return pair[1]; });
    var timer = null, serial = 0;

    function el(tag, text, cls) { var e = document.createElement(tag); if (text !== undefined) { e.textContent = text; } if (cls) { e.className = cls; } return e; }

    function render(data) {
      box.replaceChildren();
      if (!data.ok) {
        box.appendChild(el("p", data.error, "portal-preview-error"));
        box.setAttribute("data-state", "error");
        return;
      }
      box.setAttribute("data-state", "ok");
      box.appendChild(el("p", "Runs " + data.description + "."));
      var table = el("table", undefined, "portal-preview-table");
      table.appendChild(el("caption", "Next " + data.occurrences.length + " runs"));
      var head = el("tr");
      [data.zone, "UTC", "DST note, maintenance window"].forEach(function (h) { var th = el("th", h); th.scope = "col"; head.appendChild(th); });
      var thead = el("thead"); thead.appendChild(head); table.appendChild(thead);
      var body = el("tbody");
      data.occurrences.forEach(function (o) {
        var tr = el("tr");
        tr.appendChild(el("td", o.local_text));
        tr.appendChild(el("td", o.utc_text));
        var notes = (o.note ? "⚠ " + o.note : "") + (o.window ? (o.note ? " · " : "") + "‖ " + o.window : "");
        var cell = el("td", notes);
        if (o.window) { cell.className = "portal-window-note"; }
        tr.appendChild(cell);
        body.appendChild(tr);
      });
      table.appendChild(body);
      box.appendChild(table);
    }

    function update() {
      var mine = ++serial;
      var url = box.getAttribute("data-url") + "?cron_expr=" + encodeURIComponent(expr.value) + "&time_zone=" + encodeURIComponent(zone.value) + "&count=8";
      url += "&schedule_kind=" + encodeURIComponent(kind ? kind.value : "cron");
      if (period) { url += "&every_seconds=" + encodeURIComponent(period.value); }
      bounds.forEach(function (pair) { url += "&" + pair[0] + "=" + encodeURIComponent(pair[1].value); });
      // The windows that would hold it: the job's own and its tenant's (a new job: the chosen tenant's).
      var tenant = document.getElementById("id_tenant");
      if (box.getAttribute("data-job")) { url += "&job=" + encodeURIComponent(box.getAttribute("data-job")); }
      else if (tenant && tenant.value) { url += "&tenant=" + encodeURIComponent(tenant.value); }
      fetch(url, { credentials: "same-origin" })
        .then(function (r) { return r.json(); })
        .then(function (data) { if (mine === serial) { render(data); } })
        .catch(function () { if (mine === serial) { render({ ok: false, error: "Could not reach the preview; check your connection." }); } });
    }
    function later() { clearTimeout(timer); timer = setTimeout(update, 250); }
    expr.setAttribute("aria-controls", "schedule-preview");
    zone.setAttribute("aria-controls", "schedule-preview");
    [expr, zone, period].concat(bounds.map(function (pair) { return pair[1]; })).forEach(function (input) {
      if (!input) { return; }
      input.setAttribute("aria-controls", "schedule-preview");
      input.addEventListener("input", later);
      input.addEventListener("change", later);  // the date and time pickers fill the boxes without typing
    });
    if (kind) { kind.addEventListener("change", later); }
    if (expr.value || (period && period.value)) { update(); }
  });
})();
