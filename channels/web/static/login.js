/* Login page: shows the error named in ?error= and accepts #token=... from the printed link. */
(function () {
  "use strict";
  const messages = {
    invalid: "That token is not valid.",
    rate: "Too many attempts. Wait a minute and try again.",
  };
  const error = new URLSearchParams(location.search).get("error");
  const box = document.getElementById("login-error");
  if (error && messages[error]) {
    box.textContent = messages[error];
    box.hidden = false;
  }
  const hash = new URLSearchParams(location.hash.slice(1));
  const token = hash.get("token");
  if (token) {
    // Drop the token from the address bar and history before submitting it.
    history.replaceState(null, "", location.pathname);
    document.getElementById("token").value = token;
    document.getElementById("login-form").submit();
  }
})();
