/*! Dockyard chat widget __DOCKYARD_VERSION__ (loader v1). Docs: docs/web-client-and-widget.md */
(function () {
  "use strict";
  var NAME = "DockyardChat";
  if (window[NAME] && window[NAME].version) return; // loaded twice: the first copy stays in charge
  var script = document.currentScript;
  var BASE = ((script && script.src) || "").replace(/\/v1\/loader\.js(\?.*)?$/, "");
  var POSITIONS = ["bottom-right", "bottom-left", "top-right", "top-left", "inline"];
  var THEMES = ["light", "dark", "auto"];
  var mount = null;
  var pendingAuto = null;

  function log(level, msg) {
    try { console[level]("[" + NAME + "] " + msg); } catch (e) { /* no console */ }
  }
  function guard(name, fn) {
    return function () {
      try { return fn.apply(null, arguments); } catch (e) { log("error", name + "() failed: " + (e && e.message)); return false; }
    };
  }
  function load(key) {
    try { return JSON.parse(localStorage.getItem(key) || "{}") || {}; } catch (e) { return {}; }
  }
  function save(key, value) {
    try { localStorage.setItem(key, JSON.stringify(value)); } catch (e) { /* storage full or blocked */ }
  }
  function el(tag, attrs, kids) {
    var node = document.createElement(tag);
    for (var k in attrs || {}) {
      if (k === "text") node.textContent = attrs[k];
      else if (k.slice(0, 2) === "on") node.addEventListener(k.slice(2), attrs[k]);
      else if (attrs[k] !== null && attrs[k] !== false) node.setAttribute(k, attrs[k] === true ? "" : attrs[k]);
    }
    (kids || []).forEach(function (kid) { if (kid) node.appendChild(kid); });
    return node;
  }

  var CSS =
    ":host{all:initial}" +
    ".r{--bg:#fff;--fg:#1b1f24;--mut:#5b6470;--ln:#d6dbe1;--me:#1f5fd1;--mefg:#fff;--bot:#eef1f5;--ac:#1f5fd1;--err:#b42318;" +
    "font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:var(--fg)}" +
    ".r.dark{--bg:#15181d;--fg:#e8ebef;--mut:#a3acb8;--ln:#343a43;--me:#3b7bf0;--bot:#232830;--ac:#7aa7ff;--err:#ff8a80}" +
    ".l{position:fixed;z-index:2147483000;width:56px;height:56px;border-radius:50%;border:0;background:var(--me);color:var(--mefg);" +
    "display:grid;place-items:center;cursor:pointer;box-shadow:0 4px 14px rgba(0,0,0,.25)}" +
    ".p{position:fixed;z-index:2147483001;width:min(380px,calc(100vw - 32px));height:min(560px,calc(100vh - 110px));display:flex;" +
    "flex-direction:column;background:var(--bg);border:1px solid var(--ln);border-radius:12px;box-shadow:0 8px 30px rgba(0,0,0,.25);overflow:hidden}" +
    ".p[hidden]{display:none}" +
    ".bottom-right .l{right:20px;bottom:20px}.bottom-right .p{right:16px;bottom:88px}" +
    ".bottom-left .l{left:20px;bottom:20px}.bottom-left .p{left:16px;bottom:88px}" +
    ".top-right .l{right:20px;top:20px}.top-right .p{right:16px;top:88px}" +
    ".top-left .l{left:20px;top:20px}.top-left .p{left:16px;top:88px}" +
    ".inline{height:100%}.inline .p{position:static;width:100%;height:100%;border-radius:0;border:0;box-shadow:none}" +
    "@media (max-width:480px){.r:not(.inline) .p{inset:0;width:100%;height:100%;border-radius:0;border:0}}" +
    "header{display:flex;align-items:center;gap:8px;padding:10px 12px;border-bottom:1px solid var(--ln)}" +
    "h2{flex:1;margin:0;font-size:16px;font-weight:600;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}" +
    "button{font:inherit;color:inherit}" +
    ".b{border:1px solid var(--ln);background:transparent;border-radius:8px;padding:6px 10px;cursor:pointer}" +
    "button:focus-visible,textarea:focus-visible,input:focus-visible,.g:focus-visible{outline:3px solid var(--ac);outline-offset:2px}" +
    ".g{flex:1;overflow-y:auto;padding:12px;display:flex;flex-direction:column;gap:10px}" +
    ".m{max-width:85%;padding:8px 12px;border-radius:12px;white-space:pre-wrap;word-wrap:break-word}" +
    ".m.user{align-self:flex-end;background:var(--me);color:var(--mefg)}" +
    ".m.assistant{align-self:flex-start;background:var(--bot)}" +
    ".e{margin:auto;color:var(--mut);text-align:center}" +
    ".meta{display:block;margin-top:4px;font-size:12px;color:var(--mut)}" +
    ".m.err{background:transparent;border:1px solid var(--err);color:var(--err)}" +
    ".m.blk{background:transparent;border:1px dashed var(--err)}.m.blk .meta{color:var(--err)}" +
    ".n{margin:0 12px 8px;padding:8px 10px;border-radius:8px;border:1px solid var(--err);color:var(--err);font-size:14px}" +
    ".n[hidden]{display:none}" +
    "form{display:flex;gap:8px;padding:10px 12px;border-top:1px solid var(--ln)}" +
    "textarea,input{flex:1;resize:none;min-height:40px;max-height:140px;padding:8px 10px;border:1px solid var(--ln);" +
    "border-radius:8px;background:var(--bg);color:var(--fg);font:inherit}" +
    ".si{flex-wrap:wrap}.si label{flex-basis:100%;font-size:14px}" +
    ".s{white-space:nowrap;border:0;background:var(--me);color:var(--mefg);border-radius:8px;padding:0 14px;cursor:pointer}" +
    "button:disabled,textarea:disabled{opacity:.55;cursor:default}" +
    ".v{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}";

  var ICON = '<svg viewBox="0 0 24 24" width="26" height="26" aria-hidden="true" focusable="false"><path fill="currentColor" ' +
    'd="M4 3h16a2 2 0 0 1 2 2v10a2 2 0 0 1-2 2H9l-5 4v-4a2 2 0 0 1-2-2V5a2 2 0 0 1 2-2z"/></svg>';

  function Chat(opts, container) {
    var self = this;
    this.o = opts;
    this.key = "dockyard-chat:v1:" + opts.mode + ":" + BASE + ":" + opts.appId;
    this.data = load(this.key);
    if (!this.data.transcript) this.data.transcript = [];
    var handed = opts.mode === "page" && /(?:^#|&)dockyard-sign-in=([^&]+)/.exec(location.hash);
    if (handed) {  // back from the OpenID provider: the facade's callback handed over a token; confirmed below
      this.signIn = decodeURIComponent(handed[1]);
      this.handoff = true;
      this.data.token = null;
      try { history.replaceState(null, "", location.pathname + location.search); } catch (e) { /* kept */ }
    }
    this.busy = false;
    this.host = el("div", { "data-dockyard-chat": opts.appId });
    container.appendChild(this.host);
    var root = this.host.attachShadow({ mode: "open" });
    root.appendChild(el("style", { text: CSS }));
    var title = opts.title || "Chat";
    this.root = el("div", { class: "r " + opts.position, "data-position": opts.position, "data-theme": opts.theme });
    this.log = el("div", { class: "g", role: "log", "aria-live": "polite", "aria-label": "Conversation", tabindex: "0" });
    this.notice = el("p", { class: "n", role: "alert", hidden: true });
    this.input = el("textarea", { id: "dy-in", rows: "1", placeholder: "Type a message…", maxlength: "32768",
      onkeydown: function (ev) {
        if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); self.submit(); }
      } });
    this.sendBtn = el("button", { class: "s", type: "submit", "aria-label": "Send message", text: "Send" });
    var inline = opts.position === "inline";
    var closeBtn = inline ? null : el("button", { class: "b", type: "button", "aria-label": "Close chat", text: "✕",
      onclick: function () { self.setOpen(false); } });
    var themeBtn = opts.mode === "page" ? el("button", { class: "b", type: "button", "aria-label": "Switch theme",
      text: "◐", onclick: function () { self.toggleTheme(); } }) : null;
    this.form = el("form", { "aria-label": "Send a message", onsubmit: function (ev) { ev.preventDefault(); self.submit(); } }, [
      el("label", { class: "v", for: "dy-in", text: "Message" }), this.input, this.sendBtn]);
    this.panel = el("section", { class: "p", id: "dy-panel", role: inline ? "region" : "dialog",
      "aria-label": "Chat: " + title, hidden: !inline }, [
      el("header", {}, [el("h2", { text: title }), themeBtn,
        el("button", { class: "b", type: "button", "aria-label": "New conversation", text: "New",
          onclick: function () { self.reset(); self.input.focus(); } }), closeBtn]),
      this.log, this.notice, this.form]);
    if (!inline) {
      this.launcher = el("button", { class: "l", type: "button", "aria-label": "Chat", "aria-expanded": "false",
        "aria-controls": "dy-panel", onclick: function () { self.setOpen(self.panel.hidden); } });
      this.launcher.innerHTML = ICON; // a constant
      this.root.appendChild(this.launcher);
      this.panel.addEventListener("keydown", function (ev) { if (ev.key === "Escape") self.setOpen(false); });
    }
    this.root.appendChild(this.panel);
    root.appendChild(this.root);
    this.applyTheme(opts.mode === "page" && this.data.theme ? this.data.theme : opts.theme);
    this.render();
    if (opts.apiKey) {
      log("warn", "data-api-key puts an API key in a public page: every visitor can read it and use it until it is " +
        "revoked, from any site unless the environment lists its allowed origins. List this site in the environment's " +
        "spec.widget.allowedOrigins and remove data-api-key instead.");
      if (!this.data.visitor) { this.data.visitor = "visitor-" + Math.random().toString(36).slice(2, 12); this.store(); }
    }
    if (inline || this.data.open) this.setOpen(true, true);
  }

  Chat.prototype.store = function () {
    var d = this.data;
    if (d.transcript.length > 100) d.transcript = d.transcript.slice(-100);
    save(this.key, d);
  };

  Chat.prototype.applyTheme = function (theme) {
    var dark = theme === "dark" || (theme === "auto" && window.matchMedia && matchMedia("(prefers-color-scheme: dark)").matches);
    this.root.classList.toggle("dark", dark);
    this.root.setAttribute("data-theme", dark ? "dark" : "light");
    if (this.o.mode === "page") document.documentElement.style.background = dark ? "#15181d" : "#fff";
  };

  Chat.prototype.toggleTheme = function () {
    this.data.theme = this.root.classList.contains("dark") ? "light" : "dark";
    this.applyTheme(this.data.theme);
    this.store();
  };

  Chat.prototype.setOpen = function (open, quiet) {
    if (this.o.position === "inline") open = true;
    this.panel.hidden = !open;
    if (this.launcher) {
      this.launcher.setAttribute("aria-expanded", String(open));
    }
    if (this.o.position !== "inline") { this.data.open = open; this.store(); }
    if (open) this.ensureToken().catch(function () { /* shown in the panel */ });
    if (open && !quiet) this.input.focus();
    if (!open && !quiet && this.launcher) this.launcher.focus();
    if (open) this.log.scrollTop = this.log.scrollHeight;
  };

  Chat.prototype.bubble = function (role, text, meta, error, guard) {
    var meta_ = el("span", { class: "meta", text: meta || "" });
    var body = el("span", { text: text });
    var node = el("div", { class: "m " + role + (error ? " err" : "") + (guard === "block" ? " blk" : ""), "data-role": role,
      "data-guardrail": guard || null }, [
      el("span", { class: "v", text: role === "user" ? "You: " : "Assistant: " }), body, meta ? meta_ : null]);
    var empty = this.log.querySelector("p.e");  // the empty-state hint goes with the first message
    if (empty) empty.remove();
    this.log.appendChild(node);
    this.log.scrollTop = this.log.scrollHeight;
    return { node: node, body: body, meta: meta_ };
  };

  Chat.prototype.render = function () {
    this.log.textContent = "";
    if (!this.data.transcript.length) {
      if (this.o.greeting) this.bubble("assistant", this.o.greeting).node.classList.add("greeting");
      else this.log.appendChild(el("p", { class: "e", text: "Type a message below to start a conversation." }));
    }
    var self = this;
    this.data.transcript.forEach(function (m) { self.bubble(m.role, m.text, m.meta, m.error, m.guard); });
  };

  Chat.prototype.say = function (message) {
    this.notice.hidden = !message;
    this.notice.textContent = message || "";
  };

  Chat.prototype.reset = function () {
    this.data.sessionId = null;
    this.data.transcript = [];
    this.store();
    this.say("");
    this.render();
  };

  Chat.prototype.tokenUrl = function () {
    return BASE + (this.o.mode === "page" ? "/web/token" : "/v1/widget/token");
  };

  Chat.prototype.ensureToken = function (force) {
    var self = this;
    var d = this.data;
    if (this.o.apiKey) return Promise.resolve(this.o.apiKey);
    if (!force && d.token && d.expiresAt - 30 > Date.now() / 1000) return Promise.resolve(d.token);
    if (d.identified && !force && d.token) return Promise.resolve(d.token);
    if (this.tokenPromise) return this.tokenPromise;
    var body = this.o.mode === "page" ? { previousToken: d.token || null } : { appId: this.o.appId, previousToken: d.token || null };
    var headers = { "Content-Type": "application/json" };
    if (this.signIn) headers.Authorization = "Bearer " + this.signIn;
    this.tokenPromise = fetch(this.tokenUrl(), { method: "POST", headers: headers, body: JSON.stringify(body), credentials: "omit" })
      .then(function (res) {
        return res.json().catch(function () { return {}; }).then(function (json) {
          if (!res.ok) throw problem(res, json);
          var renewed = d.endUser && d.endUser !== json.endUser;
          d.token = json.token; d.expiresAt = json.expiresAt; d.endUser = json.endUser; d.identified = false;
          if (renewed) { d.sessionId = null; } // another end user: that user's conversation is not ours
          self.store();
          self.say("");
          self.setEnabled(true);
          return d.token;
        });
      }, function () { throw new Error("Cannot reach the chat service. Check your connection and try again."); })
      .then(function (t) { self.tokenPromise = null; self.endHandoff(); return t; },
        function (e) { self.tokenPromise = null; self.endHandoff(); self.tokenFailed(e); throw e; });
    return this.tokenPromise;
  };

  Chat.prototype.endHandoff = function () {
    if (this.handoff) { this.handoff = false; this.signIn = null; }
  };

  // A page carrying an API key whose call the browser blocked (CORS): the environment may list its allowed
  // sites and not this one. The token endpoint answers every site readably and says so.
  Chat.prototype.keyRefused = function () {
    var unreachable = new Error("Cannot reach the chat service. Check your connection and try again.");
    return fetch(BASE + "/v1/widget/token", { method: "POST", credentials: "omit",
      headers: { "Content-Type": "application/json" }, body: JSON.stringify({ appId: this.o.appId }) })
      .then(function (res) {
        return res.json().catch(function () { return {}; }).then(function (json) {
          var e = problem(res, json);
          var details = (json && json.error && json.error.details) || {};
          throw e.reason === "origin_not_allowed" && details.allowedOrigins > 0 ? e : unreachable;
        });
      }, function () { throw unreachable; });
  };

  function problem(res, json) {
    var err = (json && json.error) || {};
    var e = new Error(err.message || "The chat service answered " + res.status + ".");
    e.status = res.status;
    e.reason = (err.details && err.details.reason) || err.code;
    e.signIn = err.details && err.details.signIn;
    e.retryAfter = res.headers.get("Retry-After");
    return e;
  }

  Chat.prototype.setEnabled = function (on) {
    this.input.disabled = !on;
    this.sendBtn.disabled = !on;
  };

  Chat.prototype.tokenFailed = function (e) {
    if (e.reason === "origin_not_allowed") {
      this.say("This site (" + location.origin + ") is not allowed to use this chat. The site's owner must add it to " +
        "the environment's allowed origins.");
      this.setEnabled(false);
      log("error", e.message);
    } else if (e.signIn === "oidc") {
      this.showProviderSignIn(e.message);
    } else if (e.reason === "sign_in_required" || e.reason === "access_changed") {
      this.showSignIn(e.message);
    } else {
      this.say(e.message);
      log("error", e.message);
    }
  };

  // oidc: the sign-in happens at the environment's OpenID provider, which sends the browser back here
  Chat.prototype.showProviderSignIn = function (why) {
    if (this.signInForm) return;
    this.setEnabled(false);
    var button = el("button", { class: "s", type: "submit", text: "Sign in" });
    this.signInForm = el("form", { class: "si", "aria-label": "Sign in", onsubmit: function (ev) {
      ev.preventDefault();
      location.assign(BASE + "/web/oidc/login");
    } }, [button]);
    this.say(why);
    this.panel.insertBefore(this.signInForm, this.form);
    button.focus();
  };

  Chat.prototype.showSignIn = function (why) {
    var self = this;
    if (this.signInForm) return;
    this.setEnabled(false);
    var field = el("input", { id: "dy-tok", type: "password", autocomplete: "off", required: true });
    this.signInForm = el("form", { class: "si", "aria-label": "Sign in", onsubmit: function (ev) {
      ev.preventDefault();
      self.signIn = field.value.trim();
      self.data.token = null;
      self.ensureToken(true).then(function () {
        self.signIn = null;
        self.signInForm.remove();
        self.signInForm = null;
        self.input.focus();
      }, function () { self.signIn = null; field.focus(); });
    } }, [el("label", { for: "dy-tok", text: "Kubernetes token" }), field,
      el("button", { class: "s", type: "submit", text: "Sign in" })]);
    this.say(why);
    this.panel.insertBefore(this.signInForm, this.form);
    field.focus();
  };

  Chat.prototype.submit = function () {
    var text = this.input.value.trim();
    if (!text || this.busy || this.input.disabled) return;
    this.input.value = "";
    this.send(text);
  };

  Chat.prototype.send = function (text) {
    var self = this;
    var d = this.data;
    this.busy = true;
    this.sendBtn.disabled = true;
    this.say("");
    d.transcript.push({ role: "user", text: text });
    this.store();
    this.bubble("user", text);
    var out = this.bubble("assistant", "…");
    out.node.setAttribute("aria-busy", "true");
    var reply = { text: "", agent: "", tools: [], guard: "", sources: [] };
    function meta() {
      var parts = [];
      if (reply.guard === "block") parts.push("Blocked by the app's guardrails");
      if (reply.agent) parts.push("Answered by " + reply.agent);
      if (reply.tools.length) parts.push("tools: " + reply.tools.join(", "));
      if (reply.guard === "redact") parts.push("some details redacted");
      if (reply.sources.length) parts.push("sources: " + reply.sources.join("; "));
      return parts.join(" · ");
    }
    function show() {
      out.body.textContent = reply.text || "…";
      out.meta.textContent = meta();
      if (!out.meta.parentNode && out.meta.textContent) out.node.appendChild(out.meta);
      if (reply.guard) out.node.setAttribute("data-guardrail", reply.guard);
      out.node.classList.toggle("blk", reply.guard === "block");
      self.log.scrollTop = self.log.scrollHeight;
    }
    // one W3C trace per turn (docs/observability.md, "Traces"): the facade's spans of the turn join it; sent
    // unsampled (flags 00): the facade's sampler decides, so its configured ratio applies to widget turns too
    function traceparent() {
      var b = new Uint8Array(24), h = "";
      (window.crypto || window.msCrypto).getRandomValues(b);
      for (var i = 0; i < b.length; i++) h += (b[i] < 16 ? "0" : "") + b[i].toString(16);
      return "00-" + h.slice(0, 32) + "-" + h.slice(32) + "-00";
    }
    function call(token) {
      var body = { message: text, session_id: d.sessionId || null, stream: true };
      if (self.o.apiKey) body.metadata = { user_id: d.visitor };
      return fetch(BASE + "/v1/apps/" + encodeURIComponent(self.o.appId) + "/execute", {
        method: "POST", credentials: "omit",
        headers: { Authorization: "Bearer " + token, "Content-Type": "application/json", Accept: "text/event-stream",
          traceparent: traceparent() },
        body: JSON.stringify(body)
      }).catch(function (err) { return self.o.apiKey ? self.keyRefused() : Promise.reject(err); });
    }
    function finish(done) {
      reply.text = done.response;
      reply.agent = done.agent || reply.agent;
      reply.tools = done.tools_used || reply.tools;
      d.sessionId = done.session_id;
      var acts = (done.guardrails || []).map(function (g) { return g.action; });  // what guardrails did (never values)
      reply.guard = acts.indexOf("block") >= 0 ? "block" : acts.indexOf("redact") >= 0 ? "redact" : "";
      reply.sources = [];  // the knowledge-base passages the answer drew on: document, section, page (docs/knowledge-bases.md)
      (done.sources || []).forEach(function (s) {
        var path = s.headingPath || [];
        var where = s.document + (path.length > 1 ? " > " + path[path.length - 1] : "") + (s.page ? " p. " + s.page : "");
        if (reply.sources.indexOf(where) < 0) reply.sources.push(where);
      });
      show();
    }
    function onEvent(name, data) {
      if (name === "agent") { reply.agent = data.agent; show(); }
      else if (name === "tool_call") { if (reply.tools.indexOf(data.name) < 0) reply.tools.push(data.name); show(); }
      else if (name === "delta") { reply.text += data.text; show(); }
      else if (name === "done") finish(data);
      else if (name === "error") throw problem({ status: 500, headers: { get: function () { return null; } } }, data);
    }
    function stream(res) {
      if ((res.headers.get("Content-Type") || "").indexOf("text/event-stream") < 0) return res.json().then(finish);
      var reader = res.body.getReader();
      var decoder = new TextDecoder();
      var buf = "";
      function pump() {
        return reader.read().then(function (r) {
          if (r.done) return;
          buf = (buf + decoder.decode(r.value, { stream: true })).replace(/\r\n/g, "\n");
          var cut;
          while ((cut = buf.indexOf("\n\n")) >= 0) {
            var block = buf.slice(0, cut);
            buf = buf.slice(cut + 2);
            var name = "message";
            var lines = [];
            block.split("\n").forEach(function (line) {
              if (line.indexOf("event:") === 0) name = line.slice(6).trim();
              else if (line.indexOf("data:") === 0) lines.push(line.slice(5).replace(/^ /, ""));
            });
            if (lines.length) onEvent(name, JSON.parse(lines.join("\n")));
          }
          return pump();
        });
      }
      return pump();
    }
    function attempt(retried) {
      return self.ensureToken().then(call).then(function (res) {
        if (res.ok) return stream(res);
        return res.json().catch(function () { return {}; }).then(function (json) {
          var e = problem(res, json);
          if (res.status === 401 && !retried && !self.o.apiKey) {
            if (d.identified) { d.identified = false; d.token = null; d.sessionId = null; }
            return self.ensureToken(true).then(function () { return attempt(true); });
          }
          if (res.status === 404 && e.message.indexOf("session") >= 0 && !retried) {
            d.sessionId = null;
            return attempt(true);
          }
          throw e;
        });
      });
    }
    attempt(false).then(function () {
      if (!reply.text) throw new Error("The app sent no answer.");
      d.transcript.push({ role: "assistant", text: reply.text, meta: meta(), guard: reply.guard });
    }).catch(function (e) {
      if (self.o.apiKey && e.reason === "origin_not_allowed") self.tokenFailed(e);
      var msg = e.status === 429 ? "Too many messages: try again in " + (e.retryAfter || "a few") + " seconds." : e.message;
      out.node.classList.add("err");
      out.body.textContent = msg;
      d.transcript.push({ role: "assistant", text: msg, error: true });
      log("warn", msg);
    }).then(function () {
      out.node.removeAttribute("aria-busy");
      self.store();
      self.busy = false;
      if (!self.input.disabled) self.sendBtn.disabled = false;
    });
  };

  Chat.prototype.identify = function (who) {
    if (who && typeof who.token === "string" && who.token.indexOf("dyw1.") === 0) {
      this.data.token = who.token;
      this.data.expiresAt = who.expiresAt || Date.now() / 1000 + 600;
      this.data.endUser = who.endUser || "";
      this.data.identified = true;
    } else if (who === null || who === undefined) {
      this.data.token = null;
      this.data.identified = false;
      this.data.endUser = null;
    } else {
      log("error", "identify() takes {token} from POST " + BASE + "/v1/widget/token, called by your server with an " +
        "API key and endUser (see the docs), or null to go back to an anonymous visitor");
      return false;
    }
    this.reset();
    return true;
  };

  Chat.prototype.destroy = function () { this.host.remove(); };

  function init(options) {
    pendingAuto = null;
    var o = options || {};
    if (typeof o.appId !== "string" || !o.appId) { log("error", "init() needs appId (the environment's app id)"); return false; }
    var id = o.containerId;
    var container = typeof id === "string" && id ? document.getElementById(id) : null;
    if (!container) {
      log("error", "init(): no element with id \"" + id + "\" exists. Create it (e.g. <div id=\"" + id +
        "\"></div>) before the widget initialises.");
      return false;
    }
    var position = o.position || "bottom-right";
    if (POSITIONS.indexOf(position) < 0) { log("warn", "unknown position \"" + position + "\": using bottom-right"); position = "bottom-right"; }
    var theme = o.theme || "light";
    if (THEMES.indexOf(theme) < 0) { log("warn", "unknown theme \"" + theme + "\": using light"); theme = "light"; }
    if (mount) mount.destroy();
    mount = new Chat({ appId: o.appId, position: position, theme: theme, greeting: o.greeting || "", title: o.title || "",
      apiKey: o.apiKey || "", mode: o.mode === "page" ? "page" : "widget" }, container);
    return true;
  }

  function withMount(name, fn) {
    return guard(name, function (arg) {
      if (!mount) { log("error", name + "(): call init() first"); return false; }
      var result = fn(mount, arg);
      return result === undefined ? true : result;
    });
  }

  window[NAME] = {
    version: "__DOCKYARD_VERSION__",
    init: guard("init", init),
    open: withMount("open", function (m) { m.setOpen(true); }),
    close: withMount("close", function (m) { m.setOpen(false); }),
    reset: withMount("reset", function (m) { m.reset(); }),
    identify: withMount("identify", function (m, who) { return m.identify(who); })
  };

  var ds = (script && script.dataset) || {};
  if (ds.appId && ds.container) {
    pendingAuto = { appId: ds.appId, containerId: ds.container, theme: ds.theme, position: ds.position,
      greeting: ds.greeting, title: ds.title, apiKey: ds.apiKey, mode: ds.mode };
    var auto = function () { if (pendingAuto) window[NAME].init(pendingAuto); };
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", auto);
    else setTimeout(auto, 0);
  }
})();
