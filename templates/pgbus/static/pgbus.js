// pgbus dashboard: confirmations (live refresh is live.js). Forms with data-confirm ask in a dialog
// and, when confirmed, post with confirmed=1; without JavaScript the server
// shows the same question on a confirmation page instead.
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.hasAttribute("data-confirm")) {
      return;
    }
    var field = form.querySelector("input[name=confirmed]");
    if (!field) {
      return;
    }
    if (window.confirm(form.getAttribute("data-confirm"))) {
      field.value = "1";
    } else {
      event.preventDefault();
    }
  });
})();
