// campaign-sender web: keeps the figures current without reloading the page. Every
// data-refresh-s seconds it fetches the page again and swaps in its <main>, keeping the
// keyboard focus on the same link. An error page (503: the database is not answering, 404:
// the campaign is gone) is swapped in the same way, and the page recovers by itself.
(function () {
  "use strict";
  var every = Math.max(1, parseInt(document.body.dataset.refreshS || "5", 10)) * 1000;

  function focusKey(el) {
    if (!el || el === document.body) return null;
    return el.getAttribute("href") || (el.id ? "#" + el.id : null);
  }

  function refocus(main, key) {
    if (!key) return;
    var el = key.charAt(0) === "#"
      ? document.getElementById(key.slice(1))
      : main.querySelector('a[href="' + key.replace(/"/g, "") + '"]');
    if (el) el.focus({ preventScroll: true });
  }

  function refresh() {
    var main = document.getElementById("main");
    fetch(location.pathname, { headers: { Accept: "text/html" }, cache: "no-store", credentials: "same-origin" })
      .then(function (res) { return res.text(); })
      .then(function (text) {
        var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("main");
        if (!fresh) return;
        var key = main.contains(document.activeElement) ? focusKey(document.activeElement) : null;
        main.replaceChildren.apply(main, Array.prototype.map.call(fresh.childNodes, function (n) {
          return document.importNode(n, true);
        }));
        refocus(main, key);
        main.dataset.refreshedAt = String(Date.now());
      })
      .catch(function () {
        var note = document.getElementById("stale");
        if (!note) {
          note = document.createElement("p");
          note.id = "stale";
          note.className = "banner refused";
          main.prepend(note);
        }
        note.textContent = "This page could not reach campaign-sender web at " +
          new Date().toLocaleTimeString() + ": the figures below may be old.";
      })
      .finally(function () { setTimeout(refresh, every); });
  }

  setTimeout(refresh, every);
})();
