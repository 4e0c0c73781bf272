// The demo host listens for the chat's session-expired event.
window.addEventListener("message", (e) => {
  if (e.origin !== location.origin || !e.data || e.data.type !== "embedkit:session-expired") return;
  document.body.dataset.sessionExpired = "true";
  document.getElementById("expired").hidden = false;
});
