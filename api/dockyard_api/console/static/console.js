// Dockyard console: copy buttons, theme choice, version preview, and polling while a deployment runs.
(function () {
  "use strict";
  var root = document.documentElement;
  var saved = null;
  try { saved = localStorage.getItem("dockyard-theme"); } catch (e) { /* storage off */ }
  if (saved === "light" || saved === "dark") root.setAttribute("data-theme", saved);

  function onReady(fn) {
    if (document.readyState !== "loading") fn(); else document.addEventListener("DOMContentLoaded", fn);
  }

  onReady(function () {
    var toggle = document.getElementById("theme-toggle");
    if (toggle) {
      toggle.addEventListener("click", function () {
        var dark = root.getAttribute("data-theme") === "dark" ||
          (!root.getAttribute("data-theme") && window.matchMedia("(prefers-color-scheme: dark)").matches);
        var next = dark ? "light" : "dark";
        root.setAttribute("data-theme", next);
        toggle.setAttribute("aria-pressed", String(next === "dark"));
        try { localStorage.setItem("dockyard-theme", next); } catch (e) { /* storage off */ }
      });
    }

    // Copy buttons: data-copy names the element whose text (or value) is copied.
    document.querySelectorAll("[data-copy]").forEach(function (button) {
      button.addEventListener("click", function () {
        var target = document.getElementById(button.getAttribute("data-copy"));
        var text = target ? (target.value !== undefined && target.tagName !== "PRE" ? target.value : target.textContent) : "";
        var status = document.getElementById(button.getAttribute("data-copy") + "-copied");
        function done(ok) { if (status) status.textContent = ok ? "Copied." : "Copy failed: select the text and copy it."; }
        if (navigator.clipboard && navigator.clipboard.writeText) {
          navigator.clipboard.writeText(text).then(function () { done(true); }, function () { done(false); });
        } else { done(false); }
      });
    });

    // Version preview on the create-environment form: show the chosen version's contents.
    var picker = document.getElementById("appVersion");
    if (picker) {
      var show = function () {
        document.querySelectorAll("[data-preview]").forEach(function (el) {
          el.hidden = el.getAttribute("data-preview") !== picker.value;
        });
      };
      picker.addEventListener("change", show);
      show();
    }

    // Typed confirmation: the delete button is enabled once the name is typed exactly.
    document.querySelectorAll("[data-confirm-name]").forEach(function (input) {
      var button = document.getElementById(input.getAttribute("data-confirm-button"));
      var check = function () { if (button) button.disabled = input.value.trim() !== input.getAttribute("data-confirm-name"); };
      input.addEventListener("input", check);
      check();
    });

    // What the user is in the middle of is not reloaded away: once a form field on the page was changed, or while
    // the page shows something it shows once (a new API key), a refresh or the end of a deployment says so instead
    // (a reload drops what was typed; after a form was sent, reloading the answer sends the form again).
    var edited = false;
    var mark = function (e) { if (e.target && e.target.form) edited = true; };
    document.addEventListener("input", mark, true);
    document.addEventListener("change", mark, true);
    var keep = function () { return edited || document.querySelector(".key-once") !== null; };

    // Lists with work in progress (dock status IN_PROGRESS, an environment deploying) refresh themselves.
    var refresh = document.querySelector("[data-refresh]");
    if (refresh) {
      setTimeout(function () {
        if (keep()) { refresh.textContent = "Not refreshed while you are editing: reload the page to see the latest."; }
        else { window.location.reload(); }
      }, 1000 * Number(refresh.getAttribute("data-refresh")));
    }

    // Progress: poll the environment's status while a deployment is under way, then show the page again (its own
    // address, not the answer to a form that was sent).
    var progress = document.querySelector("[data-poll]");
    if (progress) {
      var url = progress.getAttribute("data-poll");
      var tick = function () {
        fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
          .then(function (r) { return r.json().then(function (b) { return { ok: r.ok, body: b }; }); })
          .then(function (res) {
            if (!res.ok) { progress.textContent = "Cannot read the progress: " + (res.body.error || "error"); return; }
            var b = res.body;
            progress.textContent = "Deploying version " + b.appVersion + ": " + b.phase +
              (b.reason ? " (" + b.reason + ")" : "") + (b.inProgress ? "…" : "");
            if (b.inProgress) { setTimeout(tick, 1000); return; }
            if (keep()) { progress.textContent += ". Reload the page to see it."; return; }
            window.location.replace(progress.getAttribute("data-page") || window.location.href);
          })
          .catch(function () { setTimeout(tick, 3000); });
      };
      setTimeout(tick, 1000);
    }
  });
})();
