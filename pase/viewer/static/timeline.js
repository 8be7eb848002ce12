/* pase plan viewer, the Time tab: the simulator's timeline on a canvas (pase/viewer/timeline.py's
   packing), zoomed with the wheel or buttons, panned by dragging; for a pipeline, the stages. */
"use strict";
window.paseTimeline = function (D, box, f) {
  var el = f.el, seconds = f.seconds, bytes = f.bytes;
  var KIND_COLOURS = {forward: "#3b7dd8", backward: "#2e9e6a", communication: "#d9822b", "gradient-sync": "#c0392b", transfer: "#9b59b6", optimizer: "#8e7cc3"};
  function drawTime() {
    var T = D.timeline;
    if (!T) { box.appendChild(el("p", {cls: "note", text: "No timeline: the strategy was priced without a cluster (give --cluster to simulate it)."})); return; }
    var rowH = T.rows.length > 80 ? 6 : 16, left = 110, h = Math.min(30000, rowH * T.rows.length + 24);
    var tools = el("div", {cls: "zoom"}, [el("button", {type: "button", id: "zoom-in", text: "+"}), el("button", {type: "button", id: "zoom-out", text: "\u2212"}), el("button", {type: "button", id: "zoom-reset", text: "reset"}),
      el("span", {cls: "note", text: "step " + seconds(T.step) + "; " + T.rows.length + " rows, " + T.count + " events" + (T.dropped ? " (" + T.dropped + " more events not drawn: a page keeps at most 100000)" : "") + "; wheel to zoom, drag to pan"})]);
    var kinds = el("div", {cls: "kinds"}, T.kinds.map(function (k) { var i = el("i"); i.style.background = KIND_COLOURS[k] || "#7f8c8d"; return el("span", null, [i, k]); }));
    var canvas = el("canvas", {id: "timeline"}), tip = el("div", {id: "tip"});
    box.appendChild(tools); box.appendChild(kinds); box.appendChild(canvas); document.body.appendChild(tip);
    var view = {a: 0, b: T.step || 1};
    var ev = decode(T);
    function draw() {
      var w = canvas.clientWidth || 1000, ratio = window.devicePixelRatio || 1;
      canvas.width = w * ratio; canvas.height = h * ratio; canvas.style.height = h + "px";
      var g = canvas.getContext("2d");
      g.setTransform(ratio, 0, 0, ratio, 0, 0);
      g.clearRect(0, 0, w, h);
      g.font = "10px system-ui,sans-serif"; g.fillStyle = "#6b7480";
      var span = view.b - view.a, sx = (w - left) / span;
      if (rowH >= 10) T.rows.forEach(function (r, i) { g.fillText(r, 2, 20 + i * rowH + rowH - 5); });
      for (var j = 0; j < ev.length; j += 5) {
        var s = ev[j + 1], e = ev[j + 2];
        if (e < view.a || s > view.b) continue;
        var x = left + (s - view.a) * sx, wd = Math.max(0.5, (e - s) * sx);
        g.fillStyle = KIND_COLOURS[T.kinds[ev[j + 4]]] || "#7f8c8d";
        g.fillRect(Math.max(left, x), 20 + ev[j] * rowH, Math.min(wd, w), rowH - 1);
      }
      g.fillStyle = "#1d232b";
      for (var k = 0; k <= 5; k++) g.fillText(seconds(view.a + span * k / 5), left + (w - left - 50) * k / 5, 10);
    }
    function zoom(f, at) {
      var span = view.b - view.a, c = at == null ? view.a + span / 2 : at, ns = Math.min(T.step || 1, span * f);
      view.a = Math.max(0, c - (c - view.a) * ns / span); view.b = view.a + ns; draw();
    }
    function timeAt(px) { var w = canvas.clientWidth || 1000; return view.a + (px - left) * (view.b - view.a) / (w - left); }
    document.getElementById("zoom-in").onclick = function () { zoom(0.5); };
    document.getElementById("zoom-out").onclick = function () { zoom(2); };
    document.getElementById("zoom-reset").onclick = function () { view.a = 0; view.b = T.step || 1; draw(); };
    canvas.addEventListener("wheel", function (e) { e.preventDefault(); zoom(e.deltaY < 0 ? 0.8 : 1.25, timeAt(e.offsetX)); }, {passive: false});
    var drag = null;
    canvas.addEventListener("mousedown", function (e) { drag = {x: e.offsetX, a: view.a, b: view.b}; });
    window.addEventListener("mouseup", function () { drag = null; });
    canvas.addEventListener("mousemove", function (e) {
      if (drag) {
        var dt = (drag.x - e.offsetX) * (drag.b - drag.a) / ((canvas.clientWidth || 1000) - left);
        view.a = Math.max(0, drag.a + dt); view.b = view.a + (drag.b - drag.a); draw(); return;
      }
      var row = Math.floor((e.offsetY - 20) / rowH), t = timeAt(e.offsetX), hit = null;
      for (var j = 0; j < ev.length; j += 5) if (ev[j] === row && ev[j + 1] <= t && t <= ev[j + 2]) { hit = j; break; }
      if (hit == null) { tip.style.display = "none"; return; }
      tip.textContent = T.rows[row] + ": " + T.labels[ev[hit + 3]] + " (" + T.kinds[ev[hit + 4]] + ") " + seconds(ev[hit + 1]) + " .. " + seconds(ev[hit + 2]);
      tip.style.left = (e.clientX + 12) + "px"; tip.style.top = (e.clientY + 12) + "px"; tip.style.display = "block";
    });
    canvas.addEventListener("mouseleave", function () { tip.style.display = "none"; });
    draw();
    if (D.pipeline) drawStages(box);
  }
  // Flat [row, start, end, label, kind] in seconds from pase/viewer/timeline.py's packing.
  function decode(T) {
    var out = [];
    T.rows.forEach(function (_, r) {
      var src = T.same[r] == null ? r : T.same[r], flat = T.events[src] || [], at = 0;
      for (var j = 0; j < flat.length; j += 4) {
        at += flat[j];
        out.push(r, at * T.tick, (at + flat[j + 1]) * T.tick, flat[j + 2], flat[j + 3]);
      }
    });
    return out;
  }
  function drawStages(box) {
    var P = D.pipeline;
    box.appendChild(el("h3", {text: "stages (per micro-batch)"}));
    box.appendChild(el("table", {id: "stages"}, [el("thead", null, [el("tr", null, ["stage", "ops", "devices", "in flight", "per micro-batch", "memory per device"].map(function (h) { return el("th", {text: h}); }))]),
      el("tbody", null, P.stages.map(function (s, i) { return el("tr", null, [el("td", {text: String(i)}), el("td", {text: s.ops.filter(function (_, k) { return k % 2 === 0; }).map(function (a, k) { return a + " .. " + s.ops[2 * k + 1]; }).join(", ")}), el("td", {text: s.device_range[0] + "-" + (s.device_range[1] - 1)}), el("td", {text: String(s.in_flight)}), el("td", {text: seconds(s.seconds_per_microbatch)}), el("td", {text: bytes(s.memory_bytes)})]); }))]));
  }

  drawTime();
};
