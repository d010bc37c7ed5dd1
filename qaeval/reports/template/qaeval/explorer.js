(function () {
  "use strict";
  // qaeval's case explorer: plain script, nothing fetched. Every text from a case is set with
  // textContent (never as markup), so no case can add markup or a script to the page.
  var PAGE = 200;
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function trialWord(c) {
    var t = c.tr || [];
    if (t.length < 2) return "one trial";
    var n = t.filter(Boolean).length;
    return n === t.length ? "all passed" : n === 0 ? "all failed" : "some failed";
  }
  function marks(t) {
    return (t || []).map(function (ok) { return ok ? "\u2713" : "\u2717"; }).join("");
  }
  function init(root) {
    if (root.getAttribute("data-ready")) return;
    root.setAttribute("data-ready", "1");
    var model = JSON.parse(root.querySelector("script.qx-data").textContent);
    var cases = model.cases, byId = {};
    cases.forEach(function (c) { byId[c.id] = c; });
    var filters = [
      { key: "r", label: "result", get: function (c) { return [c.r]; } },
      { key: "f", label: "what failed", get: function (c) { return c.f; } },
      { key: "d", label: "difficulty", get: function (c) { return [c.d]; } },
      { key: "t", label: "tag", get: function (c) { return [c.t || "(none)"]; } },
      { key: "o", label: "trials", get: function (c) { return [trialWord(c)]; } }
    ];
    (model.slices || []).forEach(function (s, i) {
      filters.push({ key: "s:" + s, label: s, get: function (c) { return [c.s[i] === undefined ? "" : c.s[i]]; } });
    });
    var columns = [
      { label: "case", get: function (c) { return c.id; } },
      { label: "question", get: function (c) { return c.q; } },
      { label: "result", get: function (c) { return c.r; } },
      { label: "trials", get: function (c) { return (c.tr || []).filter(Boolean).length + "/" + (c.tr || []).length; } },
      { label: "difficulty", get: function (c) { return c.d; } },
      { label: "tag", get: function (c) { return c.t; } }
    ];
    (model.slices || []).forEach(function (s, i) { columns.push({ label: s, get: function (c) { return c.s[i]; } }); });
    if (model.baseline) {
      columns.push({ label: "baseline", get: function (c) { return c.b ? c.b.p + "/" + c.b.n : ""; } });
    }
    columns.push({ label: "what failed", get: function (c) { return c.f.join(", "); } });
    columns.push({ label: "first reason", get: function (c) { return c.why[0] || ""; } });
    var state = { tab: model.tabs ? model.tabs[0].key : null, q: "", f: {}, sort: -1, dir: 1, group: false, limit: PAGE };
    var tabIds = {};
    (model.tabs || []).forEach(function (t) {
      if (t.ids) { tabIds[t.key] = {}; t.ids.forEach(function (i) { tabIds[t.key][i] = true; }); }
    });

    var live = root.querySelector(".qx-live");
    var stat = root.querySelector(".qx-static");
    var tabsBar = el("div", "qx-tabs"), bar = el("div", "qx-filters"), count = el("p", "qx-count");
    var detail = el("div", "qx-detail"), list = el("div", "qx-list"), cmd = el("div", "qx-command");
    detail.hidden = true;
    var search = el("input", "qx-search");
    search.type = "search";
    search.placeholder = "search ids, questions, answers";
    search.setAttribute("aria-label", "search ids, questions and answers");
    search.addEventListener("input", function () { state.q = search.value.toLowerCase(); state.limit = PAGE; draw(); });
    bar.appendChild(search);
    var selects = {};
    filters.forEach(function (f) {
      var label = el("label", "qx-filter", f.label + " ");
      var sel = el("select");
      sel.setAttribute("data-filter", f.key);
      sel.addEventListener("change", function () { state.f[f.key] = sel.value; state.limit = PAGE; draw(); });
      label.appendChild(sel);
      bar.appendChild(label);
      selects[f.key] = sel;
    });
    var groupLabel = el("label", "qx-filter"), groupBox = el("input", "qx-group-toggle");
    groupBox.type = "checkbox";
    groupBox.addEventListener("change", function () { state.group = groupBox.checked; draw(); });
    groupLabel.appendChild(groupBox);
    groupLabel.appendChild(document.createTextNode(" group failures by first reason"));
    bar.appendChild(groupLabel);
    [tabsBar, bar, count, cmd, detail, list].forEach(function (x) { live.appendChild(x); });

    function searchable(c) {
      if (c._s === undefined) c._s = [c.id, c.q, c.a].concat(c.ta || []).join("\n").toLowerCase();
      return c._s;
    }
    function passes(c, skip) {  // skip: a filter's key, or "tab", left out
      if (skip !== "tab" && state.tab && tabIds[state.tab] && !tabIds[state.tab][c.id]) return false;
      if (state.q && searchable(c).indexOf(state.q) < 0) return false;
      for (var i = 0; i < filters.length; i++) {
        var f = filters[i], want = state.f[f.key];
        if (f.key === skip || !want) continue;
        if (f.get(c).map(String).indexOf(want) < 0) return false;
      }
      return true;
    }
    function drawOptions() {
      filters.forEach(function (f) {
        var counts = {}, order = [];
        cases.forEach(function (c) {
          f.get(c).forEach(function (v) { v = String(v); if (!(v in counts)) { counts[v] = 0; order.push(v); } });
          if (passes(c, f.key)) f.get(c).forEach(function (v) { counts[String(v)] += 1; });
        });
        var sel = selects[f.key], want = state.f[f.key] || "";
        sel.textContent = "";
        var any = el("option", null, "(any)");
        any.value = "";
        sel.appendChild(any);
        order.sort().forEach(function (v) {
          var o = el("option", null, (v === "" ? "(blank)" : v) + " (" + counts[v] + ")");
          o.value = v;
          sel.appendChild(o);
        });
        sel.value = want;
        sel.parentNode.hidden = order.length === 0 && !want;
      });
    }
    function drawTabs() {
      tabsBar.textContent = "";
      (model.tabs || []).forEach(function (t) {
        var n = cases.filter(function (c) { return (!tabIds[t.key] || tabIds[t.key][c.id]) && passes(c, "tab"); }).length;
        var b = el("button", "qx-tab" + (state.tab === t.key ? " qx-on" : ""), t.label + " (" + n + ")");
        b.type = "button";
        b.setAttribute("data-tab", t.key);
        b.addEventListener("click", function () { state.tab = t.key; state.limit = PAGE; draw(); });
        tabsBar.appendChild(b);
      });
    }
    function row(c) {
      var tr = el("tr", c.r === "pass" ? "" : "bad");
      tr.setAttribute("data-case", c.id);
      columns.forEach(function (col, i) {
        var td = el("td");
        if (i === 0) {
          var a = el("a", null, c.id);
          a.href = "#case-" + encodeURIComponent(c.id);
          a.addEventListener("click", function () { showCase(c.id); });  // now; the fragment follows
          td.appendChild(a);
        } else {
          var v = col.get(c);
          td.textContent = v === undefined || v === null ? "" : (i === 1 && v.length > 120 ? v.slice(0, 119) + "\u2026" : v);
        }
        tr.appendChild(td);
      });
      return tr;
    }
    function table(rows) {
      var t = el("table", "qaeval qx-table"), head = el("tr");
      columns.forEach(function (col, i) {
        var th = el("th", null, col.label + (state.sort === i ? (state.dir > 0 ? " \u25b2" : " \u25bc") : ""));
        th.setAttribute("data-sort", String(i));
        th.style.cursor = "pointer";
        th.addEventListener("click", function () {
          state.dir = state.sort === i ? -state.dir : 1;
          state.sort = i;
          draw();
        });
        head.appendChild(th);
      });
      var thead = el("thead"), body = el("tbody");
      thead.appendChild(head);
      rows.forEach(function (c) { body.appendChild(row(c)); });
      t.appendChild(thead);
      t.appendChild(body);
      return t;
    }
    function sorted(rows) {
      if (state.sort < 0) return rows;
      var get = columns[state.sort].get;
      return rows.slice().sort(function (a, b) {
        var x = get(a), y = get(b);
        x = x === undefined || x === null ? "" : x;
        y = y === undefined || y === null ? "" : y;
        return (x < y ? -1 : x > y ? 1 : 0) * state.dir;
      });
    }
    function drawCommand(rows) {
      cmd.textContent = "";
      if (!model.command) return;
      var ids = rows.map(function (c) { return c.id; });
      var line = ids.length <= 50
        ? model.command + ids.map(function (i) { return " --case '" + i.replace(/'/g, "'\\''") + "'"; }).join("")
        : model.command + " --cases-from cases.txt";
      var box = el("textarea", "qx-command-line");
      box.readOnly = true;
      box.rows = 2;
      box.value = line;
      var copy = el("button", "qx-copy", "copy the command that reruns these " + ids.length + " cases");
      copy.type = "button";
      copy.addEventListener("click", function () {
        box.select();
        if (navigator.clipboard) navigator.clipboard.writeText(box.value).catch(function () {});
      });
      cmd.appendChild(copy);
      cmd.appendChild(box);
      if (ids.length > 50) {
        cmd.appendChild(el("span", "na", " cases.txt, one id a line:"));
        var idsBox = el("textarea", "qx-case-ids");
        idsBox.readOnly = true;
        idsBox.rows = 3;
        idsBox.value = ids.join("\n") + "\n";
        cmd.appendChild(idsBox);
      }
    }
    function draw() {
      drawTabs();
      drawOptions();
      var shown = sorted(cases.filter(function (c) { return passes(c, null); }));
      count.textContent = shown.length + " of " + cases.length + " cases shown";
      drawCommand(shown);
      list.textContent = "";
      if (state.group) {
        var groups = {}, order = [];
        shown.forEach(function (c) {
          if (c.r === "pass") return;
          var k = c.k || "(no reason)";
          if (!groups[k]) { groups[k] = []; order.push(k); }
          groups[k].push(c);
        });
        order.sort(function (a, b) { return groups[b].length - groups[a].length; });
        order.forEach(function (k) {
          var d = el("details", "qx-group"), s = el("summary", null, k + " \u2014 " + groups[k].length + " case(s)");
          d.setAttribute("data-group", k);
          d.appendChild(s);
          s.addEventListener("click", function () {
            if (d.childNodes.length === 1) d.appendChild(table(groups[k]));
          });
          list.appendChild(d);
        });
        if (!order.length) list.appendChild(el("p", "qaeval-empty", "No failing case is shown."));
        return;
      }
      list.appendChild(table(shown.slice(0, state.limit)));
      if (shown.length > state.limit) {
        var more = el("button", "qx-more", "show " + Math.min(PAGE * 5, shown.length - state.limit) + " more");
        more.type = "button";
        more.addEventListener("click", function () { state.limit += PAGE * 5; draw(); });
        list.appendChild(more);
      }
    }
    function side(title, trialMarks, answers, note) {
      var box = el("div");
      box.appendChild(el("b", null, title));
      if (note) box.appendChild(el("span", "na", " " + note));
      if (trialMarks) box.appendChild(el("div", "qx-marks", marks(trialMarks)));
      answers.forEach(function (a) { box.appendChild(el("p", "qx-answer", a)); });
      return box;
    }
    var shownId = null;
    function showCase(id) {
      var c = byId[id];
      if (!c) { detail.hidden = true; shownId = null; return false; }
      if (id === shownId && !detail.hidden) return true;  // the click drew it; its fragment's hashchange follows
      shownId = id;
      detail.textContent = "";
      detail.hidden = false;
      detail.appendChild(el("h3", null, c.id + " \u00b7 " + c.r));
      var dl = el("dl");
      [["Question", c.q], ["Gold answer", model.gold ? (c.g === null ? "(must abstain)" : c.g) : null]].forEach(function (p) {
        if (p[1] === null || p[1] === undefined) return;
        dl.appendChild(el("dt", null, p[0]));
        dl.appendChild(el("dd", null, p[1]));
      });
      if (c.why && c.why.length) {
        dl.appendChild(el("dt", null, "Why it fails"));
        var ul = el("ul");
        c.why.forEach(function (w) { ul.appendChild(el("li", null, w)); });
        var dd = el("dd");
        dd.appendChild(ul);
        dl.appendChild(dd);
      }
      detail.appendChild(dl);
      var pair = el("div", "side qx-trials");
      if (c.b) {
        pair.appendChild(side("Baseline", c.b.tr, [c.b.a === null ? "(not recorded)" : c.b.a],
          c.b.p + " of " + c.b.n + " trials passed"));
      }
      var answers = (c.ta || [c.a]).map(function (a, i) { return (c.tr && c.tr.length > 1 ? "trial " + (i + 1) + ": " : "") + a; });
      pair.appendChild(side("Now", c.tr && c.tr.length > 1 ? c.tr : null, answers,
        (c.tr || []).filter(Boolean).length + " of " + (c.tr || []).length + " trials passed"));
      detail.appendChild(pair);
      var full = document.getElementById("case-" + c.id);
      if (full && full.tagName === "DETAILS") {
        full.open = true;
        var link = el("a", null, "the full drill-down");
        link.href = "#case-" + encodeURIComponent(c.id);
        detail.appendChild(link);
      }
      return true;
    }
    function fromHash() {
      var h = decodeURIComponent(location.hash.slice(1));
      if (h.indexOf("case-") === 0 && showCase(h.slice(5))) {
        var full = document.getElementById(h);
        if (!full) detail.scrollIntoView();
      }
    }
    window.addEventListener("hashchange", fromHash);
    live.hidden = false;
    if (stat) stat.hidden = true;
    draw();
    fromHash();
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", fromHash);  // the drill-downs below
    root.setAttribute("data-drawn-ms", String(Math.round(performance.now())));
  }
  var roots = document.querySelectorAll(".qaeval-explorer");
  for (var i = 0; i < roots.length; i++) init(roots[i]);
})();
