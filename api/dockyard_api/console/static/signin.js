// A sign-in link may carry the token in its fragment (#token=...&namespace=...): the fragment never
// reaches a server; this fills the form with it and clears it from the address bar.
(function () {
  "use strict";
  var hash = window.location.hash.slice(1);
  if (!hash) return;
  var params = new URLSearchParams(hash);
  var token = params.get("token"), namespace = params.get("namespace");
  if (token) document.getElementById("token").value = token;
  if (namespace) document.getElementById("namespace").value = namespace;
  history.replaceState(null, "", window.location.pathname + window.location.search);
})();
