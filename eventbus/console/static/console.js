// Optional: every page works without it. Adds the reader's local time to each UTC timestamp.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("time[datetime]").forEach(function (el) {
    var d = new Date(el.getAttribute("datetime"));
    if (!isNaN(d.getTime())) { el.title = d.toLocaleString(); }
  });
});
