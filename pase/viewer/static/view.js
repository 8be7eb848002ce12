/* pase plan viewer: draws the page model of pase/viewer/build.py. Plain JavaScript, no dependency. */
"use strict";
(function () {
  var t0 = performance.now();
  var D = JSON.parse(document.getElementById("pase-data").textContent);
  var S = D.summary, OPS = D.ops, DEV = D.devices;
  var unit = S.unit;
  var state = {sort: null, up: false, filter: "", open: {}, selected: null};
  var drawn = {};

  function el(tag, attrs, kids) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      if (k === "text") e.textContent = attrs[k];
      else if (k === "cls") e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    (kids || []).forEach(function (c) { if (c != null) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
    return e;
  }
  function num(x, digits) { return x == null ? "-" : Number(x).toPrecision(digits || 4).replace(/\.?0+(e|$)/, "$1"); }
  function seconds(x) {
    if (x == null) return "-";
    var a = Math.abs(x);
    if (a >= 1 || a === 0) return num(x) + " s";
    if (a >= 1e-3) return num(x * 1e3) + " ms";
    if (a >= 1e-6) return num(x * 1e6) + " \u00b5s";
    return num(x * 1e9) + " ns";
  }
  function cost(x) { return x == null ? "-" : unit === "s" ? seconds(x) : num(x) + " " + unit; }
  function bytes(x) {
    if (x == null) return "-";
    var a = Math.abs(x), u = [[2 ** 40, "TiB"], [2 ** 30, "GiB"], [2 ** 20, "MiB"], [2 ** 10, "KiB"]];
    for (var i = 0; i < u.length; i++) if (a >= u[i][0]) return num(x / u[i][0]) + " " + u[i][1];
    return num(x) + " B";
  }
  function pct(x) { return x == null ? "-" : (100 * x).toFixed(x < 1e-3 ? 3 : 1) + "%"; }

  // -- summary ------------------------------------------------------------------------
  function card(k, v, d, bad) {
    return el("div", {cls: "card" + (bad ? " bad" : "")}, [el("div", {cls: "k", text: k}), el("div", {cls: "v", text: v}), d ? el("div", {cls: "d", text: d}) : null]);
  }
  function summary() {
    var box = document.getElementById("summary"), cards = [];
    cards.push(card("model", S.model, S.ops + " ops"));
    cards.push(card("devices", String(S.devices), S.cluster ? S.cluster + (S.per_node ? ", " + S.per_node + " per node" : "") : "no cluster"));
    cards.push(card("cost model", S.cost_model || "-", "unit " + unit));
    var st = S.status + (S.gap ? " (gap " + pct(S.gap) + ")" : "");
    cards.push(card("solver", S.solver ? S.solver + (S.method ? " (" + S.method + ")" : "") : "given strategy", st, S.status === "infeasible"));
    cards.push(stepCard());
    if (S.mfu != null) cards.push(card("MFU", pct(S.mfu), "3 x forward matmul FLOP / peak"));
    if (S.memory != null) {
      var c = card("memory per device", bytes(S.memory), S.memory_cap != null ? "cap " + bytes(S.memory_cap) + (S.fits === false ? ": OVER" : "") : "no cap", S.fits === false);
      if (S.memory_cap) {
        var f = Math.min(1, S.memory / S.memory_cap), bar = el("div", {cls: "membar" + (S.fits === false ? " over" : "")}, [el("i")]);
        bar.firstChild.style.width = (100 * f).toFixed(1) + "%"; c.appendChild(bar);
      }
      cards.push(c);
    }
    if (D.pipeline) cards.push(card("pipeline", D.pipeline.stages.length + " stages", "m = " + D.pipeline.microbatches + " (" + D.pipeline.schedule + "), costs per micro-batch"));
    cards.forEach(function (c) { box.appendChild(c); });
    box.appendChild(planLine());
    (S.notes || []).forEach(function (n) { box.appendChild(el("p", {cls: "note", text: n})); });
  }
  // One step time: the priced one, its parts, and the simulated one explained beside it.
  function stepCard() {
    var B = S.breakdown, parts;
    if (B && B.compute != null) {
      parts = "kernels " + cost(B.compute) + ", communication " + cost(B.communication) +
        (B.exposed_sync != null ? " (of it exposed gradient sync " + cost(B.exposed_sync) + ")" : "") +
        (B.optimizer ? ", optimizer " + cost(B.optimizer) : "") + (B.bubble ? ", bubble " + cost(B.bubble) : "");
    } else parts = S.compute == null ? "" : "layers " + cost(S.compute) + ", re-layouts " + cost(S.communication);
    var c = card(unit === "s" ? "step time (priced)" : "total cost", cost(S.total), parts);
    c.id = "step";
    if (S.simulated_step != null) {
      var d = S.step ? (S.simulated_step - S.step) / S.step : null;
      c.appendChild(el("div", {cls: "d sim", id: "simulated", text: "simulated " + seconds(S.simulated_step) +
        (d == null ? "" : " (" + (d >= 0 ? "+" : "") + (100 * d).toFixed(1) + "%)") + ", peak memory " + bytes(S.simulated_memory)}));
      c.appendChild(el("div", {cls: "d why", text: "The simulator replays every kernel and collective on each device and port, so syncs overlap the backward pass as far as dependencies allow and collectives sharing a port queue or slow each other; " + (B && B.exposed_sync != null ? "the priced step sums kernels, critical-path communication and the model's estimate of the sync the backward pass does not hide." : "the priced step sums every op's layer cost and re-layout cost as if they ran one after another, each collective in full.")}));
    }
    return c;
  }
  function planLine() {
    var L = D.layout;
    if (!L) return el("p", {cls: "plan-line", id: "plan-line", text: D.pipeline ? "pipeline of " + D.pipeline.stages.length + " stages" : ""});
    if (L.layout) return el("p", {cls: "plan-line", id: "plan-line"}, [el("b", {text: "layout: " + L.layout}), " \u2014 every op splits as Megatron-LM's layout " + L.flag + " does (pase evaluate --layout " + L.flag + ")" + (D.pipeline ? "; the stage cuts are the plan's own" : "")]);
    return el("p", {cls: "plan-line", id: "plan-line"}, [el("b", {text: L.unknown ? "layout unknown: " : "not a layout: "}), L.why.replace(/^the plan is not a layout: /, "")]);
  }

  // -- the plan ------------------------------------------------------------------------
  function chips(op) {
    var out = [];
    op.d.forEach(function (d) {
      if (d[3] > 1) out.push(el("span", {cls: "chip r-" + d[2], title: d[0] + ": " + d[1] + " split " + d[3] + " ways (" + d[2] + ")", text: d[0] + "=" + d[3]}));
    });
    if (!out.length) out.push(el("span", {cls: "rep", text: "replicated"}));
    return out;
  }
  // A folded block's splits: those all its ops share, then each other split its ops use.
  function blockChips(f) {
    var sets = [], common = null, chip = {};
    for (var i = f[0]; i < f[0] + f[1]; i++) {
      var own = [];
      OPS[i].d.forEach(function (d) { if (d[3] > 1) { var k = d[0] + "=" + d[3]; own.push(k); chip[k] = d; } });
      sets.push(own);
      common = common == null ? own.slice() : common.filter(function (k) { return own.indexOf(k) >= 0; });
    }
    var extras = [];
    sets.forEach(function (own) {
      var rest = own.filter(function (k) { return common.indexOf(k) < 0; }).join(" ") || (common.length ? "" : "replicated");
      if (rest && extras.indexOf(rest) < 0) extras.push(rest);
    });
    if (extras.length === 1 && extras[0] === "replicated") extras = [];
    function mk(k) { var d = chip[k]; return el("span", {cls: "chip r-" + d[2], title: d[0] + ": " + d[1] + " split " + d[3] + " ways (" + d[2] + ")", text: k}); }
    var out = common.map(mk);
    if (!out.length && !extras.length) return [el("span", {cls: "rep", text: "replicated"})];
    if (extras.length) {
      var span = el("span", {cls: "fold-splits", title: "splits some of the block's ops use besides those all share"});
      if (out.length) span.appendChild(document.createTextNode(" \u00b7 "));
      extras.forEach(function (e, j) {
        if (j) span.appendChild(document.createTextNode(" / "));
        if (e === "replicated") span.appendChild(el("span", {cls: "rep", text: "replicated"}));
        else e.split(" ").forEach(function (k) { span.appendChild(mk(k)); });
      });
      out.push(span);
    }
    return out;
  }
  function comp(op) { return op.t != null ? op.t : op.c; }
  function comm(op) { return op.cm != null ? op.cm : op.x; }
  function commTitle(op) {
    if (op.cm == null) return "incoming re-layouts (the cost model's edge costs)";
    return "collectives and incoming re-layouts " + cost(op.cm) + (op.cs ? ", of which gradient sync " + cost(op.cs) : "") + (D.attributed === "timeline" ? " (as on the timeline, busiest device)" : " (each collective alone, as priced)");
  }
  function bar(v, max, cls, fmt) {
    var w = max > 0 && v ? Math.max(1, Math.round(110 * v / max)) : 0, i = el("i", {cls: cls});
    i.style.width = w + "px";
    return el("div", {cls: "bar"}, [el("span", {cls: "num", text: fmt(v)}), i]);
  }
  function stageOf(i) { return OPS[i].s == null ? "" : String(OPS[i].s); }
  function opRow(i, cls, max, times) {
    var op = OPS[i];
    var tr = el("tr", {cls: cls || "", "data-op": String(i)}, [
      el("td", {text: op.n}), el("td", {text: op.k + (op.v ? " (" + op.v + ")" : "")}), el("td", null, chips(op)),
      el("td", {cls: "stage-col", text: stageOf(i)}),
      el("td", null, [bar(comp(op), max.c, "b-c", cost)]), el("td", {title: commTitle(op)}, [bar(comm(op), max.x, "b-x", cost)]),
      el("td", null, [bar(op.m, max.m, "b-m", bytes)])]);
    if (state.selected === i) tr.classList.add("sel");
    return tr;
  }
  // Every copy counted (attributed seconds may differ a little from copy to copy).
  function blockSum(f, get) { var s = 0; for (var i = f[0]; i < f[0] + f[1] * f[2]; i++) s += get(OPS[i]) || 0; return s; }
  function memOf(op) { return op.m; }
  function blockName(f) {
    var a = OPS[f[0]].n, b = OPS[f[0] + (f[2] - 1) * f[1]].n;
    return f[1] === 1 ? a + " .. " + b : a.split(".")[0] + " .. " + b.split(".")[0];
  }
  function visible() {
    var q = state.filter.toLowerCase();
    if (!q && !state.sort) return null; // the folded order
    var ids = [];
    for (var i = 0; i < OPS.length; i++) if (!q || OPS[i].n.toLowerCase().indexOf(q) >= 0 || OPS[i].k.toLowerCase().indexOf(q) >= 0) ids.push(i);
    if (state.sort) {
      var k = state.sort, sgn = state.up ? 1 : -1;
      ids.sort(function (a, b) {
        var x = VAL[k] ? VAL[k](OPS[a]) : OPS[a][k], y = VAL[k] ? VAL[k](OPS[b]) : OPS[b][k];
        if (k === "n" || k === "k") return sgn * -String(x).localeCompare(String(y)) || a - b;
        return sgn * ((x || 0) - (y || 0)) || a - b;
      });
    }
    return ids;
  }
  var VAL = {c: comp, x: comm};
  function maxima(keys) {
    var m = {c: 0, x: 0, m: 0};
    keys.forEach(function (r) {
      var v = {c: r.S ? r.c : comp(r), x: r.S ? r.x : comm(r), m: r.m};
      ["c", "x", "m"].forEach(function (k) { if (v[k] > m[k]) m[k] = v[k]; });
    });
    return m;
  }
  function drawPlan() {
    var body = document.querySelector("#plan tbody"), frag = document.createDocumentFragment();
    var ids = visible(), shown = 0;
    if (ids) {
      var mx = maxima(ids.map(function (i) { return OPS[i]; }));
      ids.forEach(function (i) { frag.appendChild(opRow(i, "", mx)); });
      shown = ids.length;
    } else {
      var sums = D.folds.map(function (f) { return f[2] > 1 ? {S: true, c: blockSum(f, comp), x: blockSum(f, comm), m: blockSum(f, memOf)} : OPS[f[0]]; });
      var mxf = maxima(sums), mxo = maxima(OPS);
      D.folds.forEach(function (f, k) {
        if (f[2] === 1) { frag.appendChild(opRow(f[0], "", mxf)); shown++; return; }
        var open = !!state.open[k], s = sums[k];
        var tr = el("tr", {cls: "block", "data-fold": String(k), title: f[2] + " identical blocks of " + f[1] + " ops; click to " + (open ? "collapse" : "expand")}, [
          el("td", null, [el("span", {cls: "tog", text: open ? "\u25be" : "\u25b8"}), blockName(f) + " ", el("b", {text: "x" + f[2]})]),
          el("td", {text: f[1] + (f[1] === 1 ? " op" : " ops") + " each"}), el("td", {cls: "splits"}, blockChips(f)), el("td", {cls: "stage-col", text: stageOf(f[0])}),
          el("td", null, [bar(s.c, mxf.c, "b-c", cost)]), el("td", {cls: "block-comm", "data-seconds": String(s.x)}, [bar(s.x, mxf.x, "b-x", cost)]), el("td", null, [bar(s.m, mxf.m, "b-m", bytes)])]);
        frag.appendChild(tr); shown++;
        if (open) {
          for (var i = f[0]; i < f[0] + f[1]; i++) { frag.appendChild(opRow(i, "inner", mxo)); shown++; }
          frag.appendChild(el("tr", {cls: "more"}, [el("td", {colspan: "7", text: "each of the " + f[2] + " blocks splits the same (costs above: the first block; on the block row: all " + f[2] + " together)"})]));
        }
      });
    }
    body.textContent = "";
    body.appendChild(frag);
    document.getElementById("shown").textContent = shown + " rows, " + OPS.length + " ops";
    document.querySelectorAll("#plan th[data-sort]").forEach(function (th) {
      th.classList.toggle("sorted", th.getAttribute("data-sort") === state.sort);
      th.classList.toggle("up", th.getAttribute("data-sort") === state.sort && state.up);
    });
  }
  function legend() {
    var box = document.getElementById("legend");
    D.roles.forEach(function (r) { box.appendChild(el("span", {cls: "chip r-" + r, text: r})); });
    var key = document.getElementById("dim-key");
    if (key && S.dims && S.dims.length) {
      key.appendChild(el("summary", {text: "dim letters"}));
      key.appendChild(el("table", null, [el("tbody", null, S.dims.map(function (d) {
        return el("tr", {"data-dim": d[0]}, [el("td", null, [el("b", {text: d[0]})]), el("td", {text: d[1] || "(this model's own letter)"}),
          el("td", null, d[2].map(function (r) { return el("span", {cls: "chip r-" + r, text: r}); }))]);
      }))]));
      key.appendChild(el("p", {cls: "hint", text: "Letters are local to an op; the colour (the dim's role) is what a dim is across ops. docs/glossary.md has the full table."}));
    } else if (key) key.hidden = true;
    var made = document.getElementById("made"), M = D.made || {};
    if (made) made.textContent = "made by " + (M.command || "pase.view() in Python") + " \u2014 pase " + (M.version || "?");
  }
  function planEvents() {
    document.querySelector("#plan tbody").addEventListener("click", function (ev) {
      var tr = ev.target.closest("tr");
      if (!tr) return;
      if (tr.hasAttribute("data-fold")) { var k = tr.getAttribute("data-fold"); state.open[k] = !state.open[k]; drawPlan(); return; }
      if (tr.hasAttribute("data-op")) { state.selected = +tr.getAttribute("data-op"); drawPlan(); devicePanel(state.selected); }
    });
    document.querySelectorAll("#plan th[data-sort]").forEach(function (th) {
      th.addEventListener("click", function () {
        var k = th.getAttribute("data-sort");
        if (state.sort === k) { if (state.up) state.sort = null; else state.up = true; } else { state.sort = k; state.up = false; }
        drawPlan();
      });
    });
    document.getElementById("filter").addEventListener("input", function (ev) { state.filter = ev.target.value; drawPlan(); });
    document.getElementById("expand-all").addEventListener("click", function () { D.folds.forEach(function (f, k) { if (f[2] > 1) state.open[k] = true; }); drawPlan(); });
    document.getElementById("collapse-all").addEventListener("click", function () { state.open = {}; drawPlan(); });
  }

  // -- devices -------------------------------------------------------------------------
  function hue(i, n) { return "hsl(" + Math.round(360 * i / Math.max(1, n)) + ",55%,45%)"; }
  function devicePanel(i) {
    var op = OPS[i], box = document.getElementById("device-panel");
    box.textContent = "";
    box.appendChild(el("h2", {text: op.n}));
    box.appendChild(el("div", null, [op.k + " ", el("span", null, chips(op))]));
    box.appendChild(el("div", {cls: "hint", text: op.d.map(function (d) { return d[0] + "=" + d[1] + " (" + d[2] + ")"; }).join(", ")}));
    var t = DEV.op_tile[i];
    if (t == null) box.appendChild(el("p", {cls: "hint", text: "no output tensor"}));
    else {
      var tile = DEV.tiles[t], groups = {}, order = [];
      var off = tile.o || 0;  // a pipeline stage's first rank
      tile.b.forEach(function (b, d) {
        var key = b == null ? "idle" : "(" + b.join(", ") + ")";
        if (!(key in groups)) { groups[key] = []; order.push(key); }
        groups[key].push(off + d);
      });
      box.appendChild(el("h3", {text: "output " + JSON.stringify(tile.s) + ", split " + tile.f.join(" x ") + ": " + (order.length - ("idle" in groups ? 1 : 0)) + " tiles"}));
      var per = DEV.per_node, nodes = {}, nodeOrder = [];
      tile.b.forEach(function (b, d) {
        var n = per ? Math.floor((off + d) / per) : 0;
        if (!(n in nodes)) { nodes[n] = []; nodeOrder.push(n); }
        nodes[n].push(d);
      });
      var tileIndex = {};
      order.forEach(function (k, j) { tileIndex[k] = j; });
      var wrap = el("div", {cls: "nodes"});
      nodeOrder.forEach(function (n) {
        var devs = el("div", {cls: "devs"});
        nodes[n].forEach(function (d) {
          var b = tile.b[d], key = b == null ? "idle" : "(" + b.join(", ") + ")";
          var c = el("div", {cls: "dev" + (b == null ? " idle" : ""), "data-device": String(off + d), title: "gpu" + (off + d) + ": tile " + key, text: "gpu" + (off + d)});
          if (b != null) c.style.background = hue(tileIndex[key], order.length);
          devs.appendChild(c);
        });
        wrap.appendChild(el("div", {cls: "node"}, [el("div", {cls: "nl", text: per ? "node " + n : "devices"}), devs]));
      });
      box.appendChild(wrap);
      var rows = order.map(function (k) {
        return el("tr", {"data-tile": k}, [el("td", {text: k === "idle" ? "idle" : "tile " + k}), el("td", {cls: "devices", text: groups[k].map(function (d) { return "gpu" + d; }).join(", ")}),
          el("td", {text: per ? "node " + uniq(groups[k].map(function (d) { return Math.floor(d / per); })).join(", ") : ""})]);
      });
      box.appendChild(el("table", {cls: "tiles"}, [el("thead", null, [el("tr", null, [el("th", {text: "tile (block per axis)"}), el("th", {text: "devices"}), el("th", {text: per ? "nodes" : ""})])]), el("tbody", null, rows)]));
    }
    var edges = DEV.edges[i];
    box.appendChild(el("h3", {text: "incoming re-layouts (busiest device)"}));
    if (!edges.length) box.appendChild(el("p", {cls: "hint", text: "no input made by another op"}));
    else box.appendChild(el("table", {cls: "edges"}, [el("thead", null, [el("tr", null, ["from", "cost", "forward", "backward"].map(function (h) { return el("th", {text: h}); }))]),
      el("tbody", null, edges.map(function (e) { return el("tr", null, [el("td", {text: OPS[e[0]].n}), el("td", {text: cost(e[1])}), el("td", {text: bytes(e[2])}), el("td", {text: bytes(e[3])})]); }))]));
  }
  function uniq(a) { return a.filter(function (x, i) { return a.indexOf(x) === i; }); }

  // -- time (timeline.js) -----------------------------------------------------------
  function drawTime() { window.paseTimeline(D, document.getElementById("tab-time"), {el: el, seconds: seconds, bytes: bytes}); }

  // -- compare -------------------------------------------------------------------------
  function splitText(op) { var s = op.d.filter(function (d) { return d[3] > 1; }).map(function (d) { return d[0] + "=" + d[3]; }).join(", "); return s || "replicated"; }
  function delta(a, b, fmt) { if (a == null || b == null) return el("td", {text: "-"}); var d = b - a; return el("td", {cls: d < 0 ? "neg" : d > 0 ? "pos" : "", text: (d > 0 ? "+" : "") + fmt(d)}); }
  function drawCompare() {
    var box = document.getElementById("tab-compare"), C = D.compare;
    if (!C) { box.appendChild(el("p", {cls: "note", text: "Nothing to compare: give a second strategy with --compare FILE2 (or compare= in pase.view)."})); return; }
    var A = C.totals[0], B = C.totals[1], L = C.labels;
    box.appendChild(el("h3", {text: "totals: " + L[0] + " against " + L[1]}));
    box.appendChild(el("table", {id: "compare-totals"}, [el("thead", null, [el("tr", null, ["", L[0], L[1], L[1] + " \u2212 " + L[0]].map(function (h) { return el("th", {text: h}); }))]),
      el("tbody", null, [["total", "total", cost], ["compute", "compute", cost], ["re-layouts", "communication", cost], ["memory per device", "memory", bytes]].map(function (r) {
        return el("tr", null, [el("td", {text: r[0]}), el("td", {text: r[2](A[r[1]])}), el("td", {text: r[2](B[r[1]])}), delta(A[r[1]], B[r[1]], r[2])]);
      }))]));
    box.appendChild(el("h3", {text: C.ops.length + " ops split differently"}));
    box.appendChild(el("table", {id: "compare-ops"}, [el("thead", null, [el("tr", null, ["op", "split " + L[0], "split " + L[1], "cost " + L[0], "cost " + L[1], "\u0394 cost", "memory " + L[0], "memory " + L[1], "\u0394 memory"].map(function (h) { return el("th", {text: h}); }))]),
      el("tbody", null, C.ops.map(function (pair) {
        var a = OPS[pair[0]], b = pair[1], ca = (a.c || 0) + (a.x || 0), cb = (b.c || 0) + (b.x || 0);
        return el("tr", {"data-op": String(pair[0])}, [el("td", {cls: "name", text: a.n}), el("td", {text: splitText(a)}), el("td", {text: splitText(b)}), el("td", {text: cost(ca)}), el("td", {text: cost(cb)}), delta(ca, cb, cost),
          el("td", {text: bytes(a.m)}), el("td", {text: bytes(b.m)}), delta(a.m, b.m, bytes)]);
      }))]));
  }

  // -- tabs ----------------------------------------------------------------------------
  var DRAW = {time: drawTime, compare: drawCompare};
  function show(tab) {
    document.querySelectorAll(".tabs button").forEach(function (b) { b.classList.toggle("on", b.getAttribute("data-tab") === tab); });
    document.querySelectorAll(".tab").forEach(function (s) { s.hidden = s.id !== "tab-" + tab; });
    if (DRAW[tab] && !drawn[tab]) { drawn[tab] = true; DRAW[tab](); }
  }
  document.querySelectorAll(".tabs button").forEach(function (b) { b.addEventListener("click", function () { show(b.getAttribute("data-tab")); }); });

  if (D.pipeline) document.body.classList.add("pipeline");
  summary(); legend(); planEvents(); drawPlan();
  window.paseView = {ready: true, drawMs: performance.now() - t0, show: show};
})();
