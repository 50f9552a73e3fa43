// pgbus dashboard: live refresh, loaded only on pages the server marks live
// (<body data-live-interval="ms">, from PGBUS_LIVE_REFRESH). Every interval it
// asks for this same URL with "X-Pgbus-Live: 1" and swaps in each region
// (data-live="name") whose HTML changed, but never one the operator is in: the
// focused element, a field they changed, or text they selected. A swap is one
// DOM operation, so the page's scroll stays; open <details> and scrolled boxes
// inside a region are carried over to its new copy. No request
// while a form field has focus, the tab is hidden, or the header's toggle is
// off (remembered in localStorage). When a refresh fails, the role=status box
// says since when the page is stale; the next success clears it.
(function () {
  "use strict";
  var body = document.body;
  var interval = parseInt(body.getAttribute("data-live-interval"), 10);
  if (!(interval > 0) || !window.fetch || !window.DOMParser) {
    return;
  }
  var KEY = "pgbus-live";
  var SCROLLERS = ".scroll, .timeline-wrap, pre";
  var control = document.querySelector("[data-live-control]");
  var toggle = control && control.querySelector("input");
  var status = document.querySelector("[data-live-status]");
  var shown = {}; // region name -> the server's HTML it shows now
  var on = remembered();
  var timer = null;
  var fetching = false;
  var last = Date.now();

  each(document.querySelectorAll("[data-live]"), function (region) {
    shown[region.getAttribute("data-live")] = region.outerHTML;
  });

  function each(list, fn) {
    Array.prototype.forEach.call(list, fn);
  }

  function remembered() {
    try {
      return window.localStorage.getItem(KEY) !== "off";
    } catch (e) {
      return true; // storage refused (privacy settings): live, not remembered
    }
  }

  function remember(value) {
    try {
      if (value) {
        window.localStorage.removeItem(KEY);
      } else {
        window.localStorage.setItem(KEY, "off");
      }
    } catch (e) { /* not remembered, still applied to this page */ }
  }

  function isField(el) {
    if (!el || el.nodeType !== 1 || el.hasAttribute("data-live-ignore")) {
      return false;
    }
    if (el.tagName === "TEXTAREA" || el.tagName === "SELECT") {
      return true;
    }
    if (el.tagName === "INPUT") {
      return !/^(button|submit|reset|image|hidden)$/i.test(el.type);
    }
    return el.isContentEditable;
  }

  function changed(field) {
    if (field.tagName === "SELECT") {
      var chosen = -1;
      for (var i = 0; i < field.options.length; i++) {
        if (field.multiple && field.options[i].selected !== field.options[i].defaultSelected) {
          return true;
        }
        if (field.options[i].defaultSelected) {
          chosen = i;
        }
      }
      // Without a "selected" option a drop-down starts on its first one.
      return !field.multiple && field.selectedIndex !== (chosen < 0 && field.size <= 1 ? 0 : chosen);
    }
    if (field.type === "checkbox" || field.type === "radio") {
      return field.checked !== field.defaultChecked;
    }
    return field.value !== field.defaultValue;
  }

  function typedIn(root) {
    return Array.prototype.some.call(root.querySelectorAll("input, textarea, select"), function (field) {
      return isField(field) && changed(field);
    });
  }

  function inUse(region) {
    var active = document.activeElement;
    if (active && active !== body && region.contains(active)) {
      return true;
    }
    var selection = window.getSelection && window.getSelection();
    if (selection && !selection.isCollapsed && selection.containsNode(region, true)) {
      return true;
    }
    return typedIn(region);
  }

  function paused() {
    return !on || document.visibilityState === "hidden" || isField(document.activeElement);
  }

  // Open <details> and scrolled boxes keep their state in the fresh copy of a region.
  function keepState(old, fresh) {
    var open = {};
    each(old.querySelectorAll("details"), function (d, i) {
      open[d.id || d.getAttribute("data-live-key") || "#" + i] = d.open;
    });
    each(fresh.querySelectorAll("details"), function (d, i) {
      var key = d.id || d.getAttribute("data-live-key") || "#" + i;
      if (key in open) {
        d.open = open[key];
      }
    });
    var scrolled = Array.prototype.map.call(old.querySelectorAll(SCROLLERS), function (el) {
      return [el.scrollLeft, el.scrollTop];
    });
    return function () {
      each(fresh.querySelectorAll(SCROLLERS), function (el, i) {
        if (scrolled[i] && (scrolled[i][0] || scrolled[i][1])) {
          el.scrollLeft = scrolled[i][0];
          el.scrollTop = scrolled[i][1];
        }
      });
    };
  }

  function apply(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    if (!doc.body || !doc.body.hasAttribute("data-live-interval")) {
      throw new Error("not a live page"); // a sign-in page, a proxy's error page
    }
    if (doc.documentElement.lang !== document.documentElement.lang) {
      return false; // another tab chose another language: reload when nothing typed is lost
    }
    each(doc.querySelectorAll("[data-live]"), function (fresh) {
      var name = fresh.getAttribute("data-live");
      var old = document.querySelector('[data-live="' + name + '"]');
      var served = fresh.outerHTML;
      if (!old || shown[name] === served || inUse(old)) {
        return;
      }
      var restore = keepState(old, fresh);
      old.replaceWith(document.adoptNode(fresh));
      restore();
      shown[name] = served;
    });
    each(doc.querySelectorAll("template[data-live-message]"), function (fresh) {
      var old = document.querySelector('template[data-live-message="' + fresh.getAttribute("data-live-message") + '"]');
      if (old) {
        old.replaceWith(document.adoptNode(fresh)); // "not updated since" this page's time
      }
    });
    return true;
  }

  function stale(kind) {
    if (!status) {
      return;
    }
    var message = kind && document.querySelector('template[data-live-message="' + kind + '"]');
    if (!message) {
      status.textContent = "";
      return;
    }
    var note = document.createElement("p");
    note.className = "flash warn";
    note.appendChild(message.content.cloneNode(true));
    if (status.textContent !== note.textContent) {
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
    var abort = window.AbortController ? new AbortController() : null;
    var limit = window.setTimeout(function () {
      if (abort) {
        abort.abort();
      }
    }, Math.max(2 * interval, 10000));
    window.fetch(window.location.href, {
      headers: {"X-Pgbus-Live": "1"}, credentials: "same-origin", cache: "no-store", redirect: "follow",
      signal: abort ? abort.signal : undefined
    }).then(function (response) {
      if (!response.ok || response.redirected) {
        return "error";
      }
      return response.text().then(function (html) {
        try {
          if (!apply(html) && !typedIn(document)) {
            window.location.reload();
          }
          return null;
        } catch (e) {
          return "error";
        }
      });
    }).catch(function () {
      return "unreachable";
    }).then(function (kind) {
      stale(kind);
      window.clearTimeout(limit);
      fetching = false;
      later(interval);
    });
  }

  function resume() {
    if (on && Date.now() - last >= interval) {
      later(0);
    }
  }

  if (control) {
    toggle.checked = on;
    control.hidden = false;
    toggle.addEventListener("change", function () {
      on = toggle.checked;
      remember(on);
      resume();
    });
  }
  window.addEventListener("storage", function (event) {
    if (event.key === KEY || event.key === null) { // the toggle in another tab
      on = remembered();
      if (toggle) {
        toggle.checked = on;
      }
      resume();
    }
  });
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") {
      resume();
    }
  });
  later(interval);
})();
