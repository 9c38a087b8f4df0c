// Live updates: a WebSocket to /ws/live/ says when runs of the user's tenants
// changed; the page then fetches itself again and swaps its live regions
// (elements with data-live-region, and the admin's result list). The server
// decides what the user may see: this script only re-reads the page.
(function () {
  "use strict";
  var selectors = ["[data-live-region]", "#result_list", "#changelist-form p.paginator"];
  var status = document.getElementById("live-status");
  var statusText = status && status.querySelector("[data-live-text]");
  var pending = null, fetching = false, again = false, retry = 1000;

  function regions(doc) {
    var found = [];
    selectors.forEach(function (sel) {
      doc.querySelectorAll(sel).forEach(function (el) { found.push(el); });
    });
    return found;
  }
  if (!regions(document).length || !("WebSocket" in window)) { return; }

  function say(text) {
    if (!status) { return; }
    status.hidden = false;
    statusText.textContent = text;
  }

  function busy() {
    // Never pull the rows from under an operator who is selecting or typing in the list.
    if (document.querySelector("#result_list input.action-select:checked")) { return true; }
    var active = document.activeElement;
    return !!(active && active.closest && active.closest("#changelist-form") && active.matches("input, select, textarea"));
  }

  function refresh() {
    if (fetching) { again = true; return; }
    if (busy()) { say("paused while rows are selected"); return; }
    fetching = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Requested-With": "live" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        selectors.forEach(function (sel) {
          var olds = document.querySelectorAll(sel), news = fresh.querySelectorAll(sel);
          olds.forEach(function (old, i) {
            if (news[i] && old.innerHTML !== news[i].innerHTML) {
              old.innerHTML = news[i].innerHTML;
              old.classList.remove("live-updated"); void old.offsetWidth; old.classList.add("live-updated");
            }
          });
        });
        document.body.setAttribute("data-live-refreshed", String(Date.now()));
        say("on, updated " + new Date().toLocaleTimeString());
      })
      .catch(function () { say("update failed; retrying"); })
      .then(function () {
        fetching = false;
        if (again) { again = false; schedule(); }
      });
  }

  function schedule() {
    if (pending) { return; }
    pending = setTimeout(function () { pending = null; refresh(); }, 300);
  }

  function connect() {
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + window.location.host + "/ws/live/");
    socket.onopen = function () { retry = 1000; say("on"); document.body.setAttribute("data-live", "connected"); };
    socket.onmessage = function (event) {
      var message = {};
      try { message = JSON.parse(event.data); } catch (e) { return; }
      if (message.type !== "changed") { return; }
      var tenant = document.querySelector("[data-live-tenant]");
      var wanted = tenant && tenant.getAttribute("data-live-tenant");
      if (wanted && wanted !== "all" && message.tenants && message.tenants.indexOf(Number(wanted)) === -1) { return; }
      schedule();
    };
    socket.onclose = function () {
      document.body.setAttribute("data-live", "offline");
      say("offline; reconnecting");
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 30000);
    };
  }
  connect();
})();
