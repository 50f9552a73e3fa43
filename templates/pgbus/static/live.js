// pgbus dashboard: live refresh, loaded only on pages the server marks live
// (<body data-live-interval="ms">, from PGBUS_LIVE_REFRESH). Every interval it
// asks for this same URL with "X-Pgbus-Live: 1" and swaps in each region
// (data-live="name") whose HTML changed, but never one the operator is in: it
// holds the focus, a field they changed, or text they selected. A swap is one
// DOM operation, so the page's scroll stays; open <details> and scrolled boxes
// are carried over to the region's new copy. Nothing is asked while a form
// field has the focus, the tab is hidden, or the header's toggle is off
// (remembered in localStorage). When a refresh fails, the role=status box says
// since when the page is stale; the next refresh that succeeds clears it.
(function () {
  "use strict";
  var interval = parseInt(document.body.getAttribute("data-live-interval"), 10);
  if (!(interval > 0) || !window.fetch || !window.DOMParser) {
    return;
  }
  var KEY = "pgbus-live";
  var SCROLLERS = ".scroll, .timeline-wrap, .timeline-scroll, pre";
  var control = document.querySelector("[data-live-control]");
  var toggle = control && control.querySelector("input");
  var status = document.querySelector("[data-live-status]");
  var shown = {}; // region name -> the server's HTML it shows now
  var on = remembered();
  var timer = null;
  var fetching = false;
  var last = Date.now();
  var each = function (list, fn) { Array.prototype.forEach.call(list, fn); };
  var some = function (list, fn) { return Array.prototype.some.call(list, fn); };

  each(document.querySelectorAll("[data-live]"), function (region) {
    shown[region.getAttribute("data-live")] = region.outerHTML;
  });

  function remembered() {
    try {
      return window.localStorage.getItem(KEY) !== "off";
    } catch (e) {
      return true; // storage refused (privacy settings): live, and not remembered
    }
  }

  function remember() {
    try {
      if (on) { window.localStorage.removeItem(KEY); } else { window.localStorage.setItem(KEY, "off"); }
    } catch (e) { /* applies to this page only */ }
  }

  function isField(el) {
    if (!el || el.nodeType !== 1 || el.hasAttribute("data-live-ignore")) { return false; }
    if (el.tagName === "TEXTAREA" || el.tagName === "SELECT") { return true; }
    if (el.tagName === "INPUT") { return !/^(button|submit|reset|image|hidden)$/i.test(el.type); }
    return el.isContentEditable;
  }

  function changed(field) {
    if (field.tagName === "SELECT") {
      var chosen = -1;
      for (var i = 0; i < field.options.length; i++) {
        var option = field.options[i];
        if (field.multiple && option.selected !== option.defaultSelected) { return true; }
        if (option.defaultSelected) { chosen = i; }
      }
      // Without a "selected" option a drop-down starts on its first one.
      return !field.multiple && field.selectedIndex !== (chosen < 0 && field.size <= 1 ? 0 : chosen);
    }
    if (field.type === "checkbox" || field.type === "radio") { return field.checked !== field.defaultChecked; }
    return field.value !== field.defaultValue;
  }

  function typedIn(root) {
    return some(root.querySelectorAll("input, textarea, select"), function (f) { return isField(f) && changed(f); });
  }

  function inUse(region) {
    var active = document.activeElement;
    var selection = window.getSelection();
    return (active && active !== document.body && region.contains(active)) ||
      (selection && !selection.isCollapsed && selection.containsNode(region, true)) || typedIn(region);
  }

  function paused() {
    return !on || document.visibilityState === "hidden" || isField(document.activeElement);
  }

  // Carries open <details> (by id or data-live-key, else position) and scroll offsets into the fresh copy.
  function keepState(old, fresh) {
    var key = function (d, i) { return d.id || d.getAttribute("data-live-key") || "#" + i; };
    var open = {};
    each(old.querySelectorAll("details"), function (d, i) { open[key(d, i)] = d.open; });
    each(fresh.querySelectorAll("details"), function (d, i) {
      if (key(d, i) in open) { d.open = open[key(d, i)]; }
    });
    var offsets = Array.prototype.map.call(old.querySelectorAll(SCROLLERS), function (el) {
      return [el.scrollLeft, el.scrollTop];
    });
    return function () { // once the copy is in the page: offsets need a layout
      each(fresh.querySelectorAll(SCROLLERS), function (el, i) {
        if (offsets[i] && (offsets[i][0] || offsets[i][1])) {
          el.scrollLeft = offsets[i][0];
          el.scrollTop = offsets[i][1];
        }
      });
    };
  }

  // Swaps the changed regions in; "error" when the answer is not this live page (a sign-in page, a proxy's).
  function apply(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    if (!doc.body || !doc.body.hasAttribute("data-live-interval")) { return "error"; }
    if (doc.documentElement.lang !== document.documentElement.lang) {
      if (!typedIn(document)) { window.location.reload(); } // another tab chose another language
      return null;
    }
    each(doc.querySelectorAll("[data-live]"), function (fresh) {
      var name = fresh.getAttribute("data-live");
      var old = document.querySelector('[data-live="' + name + '"]');
      var served = fresh.outerHTML;
      if (!old || shown[name] === served || inUse(old)) { return; }
      var restore = keepState(old, fresh);
      old.replaceWith(document.adoptNode(fresh));
      restore();
      shown[name] = served;
    });
    each(doc.querySelectorAll("template[data-live-message]"), function (fresh) { // "not updated since" now
      var kind = fresh.getAttribute("data-live-message");
      var old = document.querySelector('template[data-live-message="' + kind + '"]');
      if (old) { old.replaceWith(document.adoptNode(fresh)); }
    });
    return null;
  }

  function stale(kind) {
    var message = kind && document.querySelector('template[data-live-message="' + kind + '"]');
    if (!status || !message) {
      if (status) { status.textContent = ""; }
      return;
    }
    var note = document.createElement("p");
    note.className = "flash warn";
    note.appendChild(message.content.cloneNode(true));
    if (status.textContent !== note.textContent) { // said once, not at every failed attempt
      status.textContent = "";
      status.appendChild(note);
    }
  }

  function later(delay) {
    window.clearTimeout(timer);
    timer = window.setTimeout(refresh, delay);
  }

  function refresh() {
    if (fetching || paused()) {
      later(interval);
      return;
    }
    fetching = true;
    last = Date.now();
    var abort = new AbortController();
    var limit = window.setTimeout(function () { abort.abort(); }, Math.max(2 * interval, 10000));
    window.fetch(window.location.href, {
      headers: {"X-Pgbus-Live": "1"}, credentials: "same-origin", cache: "no-store", signal: abort.signal
    }).then(function (response) {
      return response.ok && !response.redirected ? response.text().then(apply) : "error";
    }).catch(function () {
      return "unreachable"; // no answer: refused, cut off, or slower than the limit
    }).then(function (kind) {
      window.clearTimeout(limit);
      stale(kind);
      fetching = false;
      later(interval);
    });
  }

  function resume() {
    if (on && Date.now() - last >= interval) { later(0); }
  }

  if (control) {
    toggle.checked = on;
    control.hidden = false;
    toggle.addEventListener("change", function () {
      on = toggle.checked;
      remember();
      resume();
    });
  }
  window.addEventListener("storage", function (event) { // the toggle, switched in another tab
    if (event.key === KEY || event.key === null) {
      on = remembered();
      if (toggle) { toggle.checked = on; }
      resume();
    }
  });
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") { resume(); }
  });
  later(interval);
})();
