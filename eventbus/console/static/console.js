// Optional: every page works without it. Adds the reader's local time to each UTC timestamp,
// and reloads a page that watches something (overview, failures, streams, runs) every few
// seconds unless the reader turns it off (remembered in this browser). No inline script: the
// Content-Security-Policy allows this file only.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("time[datetime]").forEach(function (el) {
    var d = new Date(el.getAttribute("datetime"));
    if (!isNaN(d.getTime())) { el.title = d.toLocaleString(); }
  });
  autoRefresh(document.getElementById("auto-refresh"));
});

function autoRefresh(box) {
  if (!box) { return; }
  var key = "eventbus-console-refresh";
  var seconds = parseInt(box.getAttribute("data-seconds"), 10) || 15;
  var timer = null;
  var stored = null;
  try { stored = window.localStorage.getItem(key); } catch (e) { /* storage refused */ }
  box.checked = stored !== "off";
  box.closest(".refresh").hidden = false;
  function busy() {  // never reload under a reader who is typing, or a hidden tab
    var el = document.activeElement;
    return document.hidden || (el && /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName) && el !== box);
  }
  function tick() {
    if (!box.checked) { return; }
    if (busy()) { schedule(); return; }
    window.location.reload();
  }
  function schedule() {
    window.clearTimeout(timer);
    if (box.checked) { timer = window.setTimeout(tick, seconds * 1000); }
  }
  box.addEventListener("change", function () {
    try { window.localStorage.setItem(key, box.checked ? "on" : "off"); } catch (e) { /* ignore */ }
    schedule();
  });
  schedule();
}
