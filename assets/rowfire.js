// Rowfire's one script: served from the binary at /assets/rowfire.js.
"use strict";

// ---- The author's pages: the SQL editor, action buttons, Get started. ----
(function () {
  function $(id) { return document.getElementById(id); }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function post(url, body) {
    return fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body || {})
    }).then(function (r) {
      return r.json().then(function (j) { return { ok: r.ok, status: r.status, body: j }; });
    });
  }
  function problem(res) {
    var e = res.body && res.body.error;
    return e ? e.message : "the server answered " + res.status;
  }
  // An error shown next to the field at fault (`#PREFIX-FIELD-error`), else in `fallback`.
  function showError(res, prefix, fallback) {
    var e = res.body && res.body.error;
    var spot = e && e.field && $(prefix + "-" + e.field + "-error");
    (spot || fallback).textContent = problem(res);
  }

  // The SQL editor: checked as you type (debounced), the guard's reason next to it.
  function editor() {
    var form = $("trigger-editor"), sql = $("sql"), verdict = $("guard-verdict");
    if (!form || !sql || !verdict) return;
    // editedAt: the last keystroke or change of clock or key; each verdict shown records in data-ms
    // how long after it (debounce, request and rendering), the delay the person editing waits.
    var timer = null, seq = 0, editedAt = 0;
    function shown() { verdict.dataset.ms = String(Math.round(performance.now() - editedAt)); }
    function columns(list) {
      var body = $("output-columns").querySelector("tbody");
      body.textContent = "";
      list.forEach(function (c) {
        var tr = el("tr", { "data-column": c.name });
        var td = el("td"); td.appendChild(el("code", {}, c.name)); tr.appendChild(td);
        tr.appendChild(el("td", {}, c.type)); body.appendChild(tr);
      });
      ["clock", "key"].forEach(function (id) {
        var select = $(id), keep = {};
        Array.prototype.forEach.call(select.selectedOptions, function (o) { keep[o.value] = true; });
        select.textContent = "";
        list.forEach(function (c) {
          var o = el("option", { value: c.name }, c.name);
          if (keep[c.name]) o.selected = true;
          select.appendChild(o);
        });
      });
    }
    function check() {
      var mine = ++seq;
      if (!sql.value.trim()) { verdict.dataset.state = "empty"; verdict.className = "verdict empty"; verdict.textContent = "Type a SELECT; it is checked as you type."; return; }
      verdict.dataset.state = "pending"; verdict.className = "verdict pending"; verdict.textContent = "Checking…";
      delete verdict.dataset.ms;
      var picked = { sql: sql.value, source: form.dataset.source };
      if ($("clock") && $("clock").value) {
        picked.clock = $("clock").value;
        picked.key = Array.prototype.map.call($("key").selectedOptions, function (o) { return o.value; });
      }
      post(form.dataset.checkUrl, picked).then(function (res) {
        if (mine !== seq) return;
        var v = res.body;
        if (!res.ok) { verdict.dataset.state = "refused"; verdict.className = "verdict refused"; verdict.textContent = problem(res); shown(); return; }
        verdict.dataset.state = v.ok ? "ok" : "refused";
        verdict.className = "verdict " + verdict.dataset.state;
        verdict.textContent = v.ok ? "The guard admits this query; it returns " + v.columns.length + " column(s)." : v.reason;
        sql.setAttribute("aria-invalid", v.ok ? "false" : "true");
        if (v.ok) columns(v.columns);
        if (v.ok && v.planned_sql && $("planned-sql")) $("planned-sql").textContent = v.planned_sql;
        shown();
      }).catch(function () { if (mine === seq) verdict.textContent = "Could not reach the server to check."; });
    }
    sql.addEventListener("input", function () { editedAt = performance.now(); clearTimeout(timer); timer = setTimeout(check, 250); });
    ["clock", "key"].forEach(function (id) { if ($(id)) $(id).addEventListener("change", function () { editedAt = performance.now(); check(); }); });
  }

  // Buttons that POST to the API and say what happened (run now, promote, demote, rewind).
  function actions() {
    var result = $("action-result");
    ["run-now", "promote", "demote"].forEach(function (id) {
      var b = $(id);
      if (!b) return;
      b.addEventListener("click", function () {
        b.disabled = true;
        post(b.dataset.url).then(function (res) {
          b.disabled = false;
          if (!res.ok) { result.textContent = problem(res); return; }
          if (id === "run-now") {
            var r = res.body;
            result.textContent = r.trigger + ": " + r.status + (r.reason ? " (" + r.reason + ")" : "") + ", matched=" + r.matched + " fired=" + r.fired + " already=" + r.already;
          } else { window.location.reload(); }
        });
      });
    });
    var rewind = $("rewind-form");
    if (rewind) rewind.addEventListener("submit", function () {
      post(rewind.dataset.url, { days: Number($("rewind-days").value) }).then(function (res) {
        result.textContent = res.ok ? "Watermark moved back to " + res.body.watermark + "; " + res.body.message : problem(res);
      });
    });
  }

  // Get started.
  function start() {
    var dataEl = $("start-data");
    if (!dataEl) return;
    var data = JSON.parse(dataEl.textContent), trigger = $("start-trigger"), message = $("start-message");
    function current() { return data[trigger.value] || { columns: [], rows: [] }; }
    function render(template, row) {
      return template.replace(/\{\{\s*([A-Za-z0-9_.]+)\s*\}\}/g, function (_, name) {
        var v = row[name];
        return v === undefined || v === null ? "" : String(v);
      });
    }
    function preview() {
      var box = $("start-preview"), t = current();
      box.textContent = "";
      if (t.error) { box.appendChild(el("p", { "class": "error" }, t.error)); return; }
      if (!t.rows || !t.rows.length) { box.appendChild(el("p", { "class": "empty" }, "No sample rows in the last 90 days for this event.")); return; }
      t.rows.forEach(function (row) { box.appendChild(el("div", { "class": "preview", "data-preview": "" }, render(message.value, row))); });
    }
    function pick() {
      var t = current(), cols = $("start-columns");
      $("start-trigger-description").textContent = t.description || "";
      cols.textContent = "";
      t.columns.forEach(function (c) {
        var b = el("button", { type: "button", "data-column": c }, c);
        b.addEventListener("click", function () {
          var at = message.selectionStart || message.value.length, token = "{{ " + c + " }}";
          message.value = message.value.slice(0, at) + token + message.value.slice(message.selectionEnd || at);
          message.focus(); preview();
        });
        cols.appendChild(b);
      });
      preview();
    }
    function rule() {
      var cadence = document.querySelector("input[name=cadence]:checked").value, r = {
        name: $("start-name").value, trigger: trigger.value, message: message.value
      };
      if (cadence === "once_ever") r.policy = "once_ever";
      else if (cadence === "nth") { r.policy = "once_per_n"; r.n = Number($("start-n").value); }
      else { r.policy = "once_per_period"; r.period = cadence; r.timezone = $("start-timezone").value; }
      return r;
    }
    function clearErrors() { Array.prototype.forEach.call(document.querySelectorAll("#start-form .error[id$=-error]"), function (e) { e.textContent = ""; }); }
    function chart(report) {
      var box = $("start-backtest-result"), ns = "http://www.w3.org/2000/svg";
      box.textContent = "";
      var days = report.per_day.length, max = 1, w = 720, h = 160;
      report.per_day.forEach(function (d) { if (d.fires > max) max = d.fires; });
      var svg = document.createElementNS(ns, "svg");
      svg.setAttribute("id", "backtest-chart"); svg.setAttribute("role", "img");
      svg.setAttribute("viewBox", "0 0 " + w + " " + (h + 20)); svg.setAttribute("preserveAspectRatio", "none");
      svg.setAttribute("data-total", report.fires); svg.setAttribute("data-days", days);
      svg.setAttribute("aria-label", report.fires + " fires over " + days + " days");
      report.per_day.forEach(function (d, i) {
        var bh = h * d.fires / max, r = document.createElementNS(ns, "rect"), bw = w / Math.max(days, 1);
        r.setAttribute("class", "bar"); r.setAttribute("x", (i * bw).toFixed(2)); r.setAttribute("y", (h - bh).toFixed(2));
        r.setAttribute("width", Math.max(bw - 1, 0.5).toFixed(2)); r.setAttribute("height", bh.toFixed(2));
        r.setAttribute("data-date", d.date); r.setAttribute("data-fires", d.fires);
        var title = document.createElementNS(ns, "title"); title.textContent = d.date + ": " + d.fires + " fire(s)"; r.appendChild(title);
        svg.appendChild(r);
      });
      var fig = el("figure", { "class": "chart" }); fig.appendChild(svg);
      fig.appendChild(el("figcaption", { id: "backtest-headline" }, report.fires + " fire(s) from " + report.rows_matched + " matching row(s) over " + report.days + " day(s) (" + report.time_zone + ")" + (report.busiest_day ? "; busiest " + report.busiest_day.date + " with " + report.busiest_day.fires : "") + "."));
      box.appendChild(fig);
      var table = el("table", { id: "backtest-numbers" }), body = el("tbody");
      report.per_day.forEach(function (d) { var tr = el("tr", { "data-date": d.date }); tr.appendChild(el("td", {}, d.date)); tr.appendChild(el("td", { "data-fires": d.fires }, String(d.fires))); body.appendChild(tr); });
      table.appendChild(body); var det = el("details"); det.appendChild(el("summary", {}, "Fires per day, as numbers")); det.appendChild(table); box.appendChild(det);
    }
    trigger.addEventListener("change", pick);
    message.addEventListener("input", preview);
    $("start-backtest").addEventListener("click", function () {
      clearErrors();
      $("start-backtest-result").textContent = "Backtesting…";
      post("/api/rules/backtest", { rule: rule(), days: Number($("start-days").value), sample: 0 }).then(function (res) {
        if (!res.ok) { $("start-backtest-result").textContent = ""; showError(res, "start", $("start-backtest-result")); return; }
        chart(res.body);
      });
    });
    $("start-turn-on").addEventListener("click", function () {
      clearErrors();
      var r = rule(), out = $("start-result");
      out.textContent = "Adding " + r.name + "…";
      post("/api/rules", r).then(function (res) {
        if (!res.ok) { out.textContent = ""; showError(res, "start", out); return null; }
        return post("/api/rules/" + encodeURIComponent(r.name) + "/promote").then(function (p) {
          if (!p.ok) { out.textContent = problem(p); return; }
          out.textContent = r.name + " is live (definitions version " + res.body.version + ").";
          out.dataset.rule = r.name;
          $("start-watch").hidden = false;
        });
      });
    });
    pick();
  }

  function ready() { editor(); actions(); start(); }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready); else ready();
})();
// ---- Operator pages (Activity, Demo inbox, Integrations): live feeds and API forms. ----

// Live feeds: every element with data-stream opens the server-sent event stream at that URL,
// from the ids the page was drawn with (data-after-*), and keeps its lists current: an event
// carries the item's HTML; an item already shown (same data-*-id) is replaced, a new one is
// put first and the list's empty state hidden.
function rowfireLiveFeeds() {
  document.querySelectorAll("[data-stream]").forEach(function (root) {
    var params = new URLSearchParams();
    params.set("topics", root.dataset.topics || "run,fire,delivery,inbox,status");
    ["run", "fire", "delivery", "inbox"].forEach(function (topic) {
      var after = root.dataset["after" + topic.charAt(0).toUpperCase() + topic.slice(1)];
      if (after !== undefined) params.set(topic, after);
    });
    var source = new EventSource(root.dataset.stream + "?" + params.toString());
    var lists = {
      run: ["runs-feed", "runs-empty", "data-run-id", "id"],
      fire: ["fires-feed", "fires-empty", "data-fire-id", "id"],
      delivery: ["deliveries-feed", "deliveries-empty", "data-delivery-id", "id"],
      inbox: ["inbox-feed", "inbox-empty", "data-delivery-id", "delivery_id"]
    };
    Object.keys(lists).forEach(function (topic) {
      source.addEventListener(topic, function (e) {
        var spec = lists[topic];
        var list = document.getElementById(spec[0]);
        if (!list) return;
        var item = JSON.parse(e.data);
        rowfireUpsert(list, spec[2], item[spec[3]], item.html);
        var empty = document.getElementById(spec[1]);
        if (empty) empty.hidden = true;
      });
    });
    source.addEventListener("status", function (e) {
      var shown = document.getElementById("halt-state");
      if (!shown) return;
      // The kill switch's form changes with the state: draw the page again.
      window.location.reload();
    });
  });
}

// Puts `html` (one element) into `list`: in place of the element whose `attr` is `id`, else first.
function rowfireUpsert(list, attr, id, html) {
  var holder = document.createElement("div");
  holder.innerHTML = html;
  var fresh = holder.firstElementChild;
  if (!fresh) return;
  var old = list.querySelector("[" + attr + "=\"" + String(id) + "\"]");
  if (old) {
    old.replaceWith(fresh);
  } else {
    list.insertBefore(fresh, list.firstElementChild);
  }
}

// API forms: a form with data-api is sent as JSON (fields with data-json parsed as JSON, empty
// fields left out) to that URL with data-method. An error is shown next to the field it names
// ([data-error-for]); on success the page reloads (data-then="reload") or the answer is shown
// in the element data-result names.
function rowfireApiForms() {
  document.querySelectorAll("form[data-api]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      form.querySelectorAll("[data-error-for]").forEach(function (p) { p.textContent = ""; });
      form.querySelectorAll("[aria-invalid]").forEach(function (el) { el.removeAttribute("aria-invalid"); });
      var body = {};
      try {
        Array.prototype.forEach.call(form.elements, function (el) {
          if (!el.name || el.value === "") return;
          if (el.hasAttribute("data-json")) {
            try { body[el.name] = JSON.parse(el.value); } catch (e) { throw { field: el.name }; }
          } else {
            body[el.name] = el.value;
          }
        });
      } catch (bad) {
        rowfireFieldError(form, bad.field, "This is not valid JSON.");
        return;
      }
      var button = form.querySelector("button[type=submit]");
      if (button) button.disabled = true;
      fetch(form.dataset.api, {
        method: form.dataset.method || "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
        credentials: "same-origin"
      }).then(function (response) {
        return response.text().then(function (text) {
          var json = null;
          try { json = text ? JSON.parse(text) : null; } catch (e) { json = null; }
          if (!response.ok) {
            var error = (json && json.error) || { message: "The server answered " + response.status + "." };
            rowfireFieldError(form, error.field || "body", error.message);
            return;
          }
          if (form.dataset.then === "reload") { window.location.reload(); return; }
          var result = document.getElementById(form.dataset.result || "");
          if (result) result.textContent = JSON.stringify(json, null, 2);
        });
      }).catch(function () {
        rowfireFieldError(form, "body", "The server could not be reached.");
      }).finally(function () {
        if (button) button.disabled = false;
      });
    });
  });
}

// Shows `message` next to the form's field `field` (or the form's general error line).
function rowfireFieldError(form, field, message) {
  var slot = form.querySelector("[data-error-for=\"" + field + "\"]") ||
    form.querySelector("[data-error-for=\"body\"]");
  if (slot) slot.textContent = message;
  var input = form.querySelector("[name=\"" + field + "\"]");
  if (input) { input.setAttribute("aria-invalid", "true"); input.focus(); }
}

document.addEventListener("DOMContentLoaded", function () {
  rowfireLiveFeeds();
  rowfireApiForms();
});
