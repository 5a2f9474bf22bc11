// The job page's preview of upcoming occurrences (scheduling.web.admin.previews): while the
// timing fields change, ask the admin's preview endpoint for the next occurrences of the
// unsaved timing and show them, or the fields' errors. Reads only; nothing is saved.
"use strict";
(function () {
  var FIELDS = ["interval", "cron", "rrule", "timezone", "run_at_0", "run_at_1",
    "starts_at_0", "starts_at_1", "ends_at_0", "ends_at_1"];
  var WAIT_MS = 300;

  function fill(list, items, render) {
    while (list.firstChild) {
      list.removeChild(list.firstChild);
    }
    items.forEach(function (item) {
      var li = document.createElement("li");
      render(li, item);
      list.appendChild(li);
    });
  }

  function show(box, answer) {
    var zone = box.querySelector(".duecourse-preview-zone");
    var inUtc = answer.zone === "UTC";
    zone.textContent = !answer.zone ? "" : inUtc ? "In UTC:" : "In " + answer.zone + " and in UTC:";
    fill(box.querySelector(".duecourse-preview-list"), answer.occurrences || [], function (li, row) {
      var time = document.createElement("time");
      time.setAttribute("datetime", row.machine);
      time.textContent = row.local;
      var utc = document.createElement("span");
      utc.className = "duecourse-preview-utc";
      utc.textContent = "(" + row.utc + ")";
      li.appendChild(time);
      if (row.utc !== row.local) {
        li.appendChild(document.createTextNode(" "));
        li.appendChild(utc);
      }
    });
    fill(box.querySelector(".duecourse-preview-notes"), answer.notes || [], function (li, note) {
      li.textContent = note;
    });
    var errors = [];
    Object.keys(answer.errors || {}).forEach(function (field) {
      answer.errors[field].forEach(function (message) {
        errors.push(field + ": " + message);
      });
    });
    fill(box.querySelector(".duecourse-preview-errors"), errors, function (li, text) {
      li.textContent = text;
    });
    box.setAttribute("data-state", errors.length ? "invalid" : "shown");
  }

  function start(box) {
    var form = box.closest("form");
    if (!form) {
      return;
    }
    var timer = null;
    var asked = 0;

    function refresh() {
      var query = new URLSearchParams();
      FIELDS.forEach(function (name) {
        var field = form.elements.namedItem(name);
        if (field && typeof field.value === "string") {
          query.append(name, field.value);
        }
      });
      var mine = ++asked;
      box.setAttribute("data-state", "loading");
      fetch(box.getAttribute("data-preview-url") + "?" + query.toString(), {
        credentials: "same-origin",
        headers: { "Accept": "application/json" },
      })
        .then(function (response) { return response.json(); })
        .then(function (answer) {
          if (mine === asked) {
            show(box, answer);
          }
        })
        .catch(function () {
          if (mine === asked) {
            show(box, { errors: { preview: ["could not be loaded"] } });
          }
        });
    }

    function later() {
      window.clearTimeout(timer);
      timer = window.setTimeout(refresh, WAIT_MS);
    }

    FIELDS.forEach(function (name) {
      var field = form.elements.namedItem(name);
      if (field && field.addEventListener) {
        field.addEventListener("input", later);
        field.addEventListener("change", later);
      }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll(".duecourse-timing-preview").forEach(start);
  });
})();
