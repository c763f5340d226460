// runlens report: draws the charts of a run page or a comparison page with ECharts, from
// the JSON in the runlens-data script element. Text sections are already HTML (page.py); this
// only fills the <div class="chart"> containers. A chart that fails logs an error (the
// browser test fails on it) and the others still draw.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("runlens-data").textContent);
  var charts = [];
  var RED = "#dc2626", GREEN = "#16a34a", GREY = "#94a3b8", BLUE = "#2563eb",
      AMBER = "#f59e0b";

  function fmtUs(us) {
    if (us >= 1e6) return (us / 1e6).toFixed(2) + "s";
    if (us >= 1e3) return (us / 1e3).toFixed(2) + "ms";
    return (Number.isInteger(us) ? us.toFixed(0) : us.toFixed(1)) + "us";
  }
  function fmtBytes(b) {
    var units = [["GB", 1e9], ["MB", 1e6], ["KB", 1e3]];
    for (var i = 0; i < units.length; i++) {
      if (Math.abs(b) >= units[i][1]) return (b / units[i][1]).toFixed(2) + units[i][0];
    }
    return b.toFixed(0) + "B";
  }
  function pct(part, whole) { return whole ? (100 * part / whole).toFixed(1) + "%" : "-"; }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c];
    });
  }
  function leaf(name) { var i = name.lastIndexOf("/"); return i < 0 ? name : name.slice(i + 1); }
  function hash(s) {
    var h = 0;
    for (var i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0;
    return Math.abs(h);
  }

  function draw(key, height, build) {
    var el = document.getElementById("chart-" + key);
    if (!el) return;  // the section says its data is missing
    try {
      el.style.height = height + "px";
      var chart = echarts.init(el, null, {renderer: "canvas"});
      var option = build(chart);
      option.animation = false;
      chart.setOption(option);
      charts.push(chart);
      el.setAttribute("data-drawn", "1");
    } catch (e) {
      console.error("runlens report: chart " + key + " failed: " + (e && e.stack || e));
    }
  }

  // ------------------------------------------------------------------ run page

  function stepsChart() {
    var s = data.steps;
    var workers = [];
    s.rows.forEach(function (r) { if (workers.indexOf(r.worker) < 0) workers.push(r.worker); });
    var point = function (r) { return [r.step, r.step_us / 1000, r.worker]; };
    var many = s.rows.length > 60;
    var series = workers.map(function (w) {
      return {
        name: w, type: "line", symbolSize: 6, showSymbol: !many,
        data: s.rows.filter(function (r) { return r.worker === w; }).map(point),
        markLine: {silent: true, symbol: "none", lineStyle: {type: "dashed"},
                   label: {formatter: function (p) { return "median " + p.value.toFixed(2) + " ms"; }},
                   data: [{type: "median"}]}
      };
    });
    series.push({name: "warm-up", type: "scatter", symbol: "triangle", symbolSize: many ? 9 : 14,
                 itemStyle: {color: AMBER}, z: 5,
                 data: s.rows.filter(function (r) { return r.warmup; }).map(point)});
    series.push({name: "outlier", type: "scatter", symbol: "diamond", symbolSize: many ? 8 : 14,
                 itemStyle: {color: RED}, z: 5,
                 data: s.rows.filter(function (r) { return r.outlier && !r.warmup; }).map(point)});
    return {
      tooltip: {trigger: "item", formatter: function (p) {
        return esc(p.value[2]) + " step " + p.value[0] + ": " + p.value[1].toFixed(3) + " ms" +
          (p.seriesName === "warm-up" || p.seriesName === "outlier" ? " (" + p.seriesName + ")" : "");
      }},
      legend: {top: 0},
      grid: {left: 60, right: 30, top: 40, bottom: many ? 70 : 40},
      xAxis: {type: "value", name: "step", scale: true, minInterval: 1},
      yAxis: {type: "value", name: "ms", scale: false},
      dataZoom: many ? [{type: "inside"}, {type: "slider"}] : [],
      series: series
    };
  }

  function opsChart() {
    var ops = data.ops, total = ops.total.micros;
    var rows = ops.rows.slice().sort(function (a, b) { return b.micros - a.micros; });
    var shown = rows.slice(0, 25);
    var rest = rows.slice(25).reduce(function (s, r) { return s + r.micros; }, 0);
    var items = shown.map(function (r) {
      return {name: r.name, value: r.micros, row: r};
    });
    if (rest > 0) items.push({name: "(" + (rows.length - 25) + " more)", value: rest, row: null});
    items.reverse();
    return {
      tooltip: {trigger: "item", formatter: function (p) {
        var r = p.data.row;
        return "<b>" + esc(p.name) + "</b><br>" + fmtUs(p.value) + " per step, " +
          pct(p.value, total) + " of op time" +
          (r ? "<br>" + r.nodes + " nodes, " + r.occurrence + " runs, requests " +
               fmtBytes(r.requested_bytes) : "");
      }},
      grid: {left: 190, right: 70, top: 10, bottom: 30},
      xAxis: {type: "value", axisLabel: {formatter: fmtUs}},
      yAxis: {type: "category", data: items.map(function (i) { return i.name; }),
              axisLabel: {width: 180, overflow: "truncate"}},
      series: [{type: "bar", data: items.map(function (i) {
        return {value: i.value, row: i.row, name: i.name};
      }), itemStyle: {color: BLUE},
        label: {show: true, position: "right", formatter: function (p) { return pct(p.value, total); }}}]
    };
  }

  function opNodesChart() {
    var total = data.ops.total.micros;
    var items = data.op_nodes.types.map(function (t) {
      var children = t.nodes.map(function (n) { return {name: n[0], value: n[1]}; });
      if (t.rest > 0) children.push({name: "(" + t.rest_nodes + " more nodes)", value: t.rest});
      var sum = children.reduce(function (s, c) { return s + c.value; }, 0);
      return {name: t.name, value: sum, children: children};
    }).filter(function (t) { return t.value > 0; });
    return {
      tooltip: {formatter: function (p) {
        return "<b>" + esc(p.name) + "</b><br>" + fmtUs(p.value) + " per step (" +
          pct(p.value, total) + " of op time)";
      }},
      series: [{
        type: "treemap", data: items, leafDepth: 1, roam: false, nodeClick: "zoomToNode",
        top: 30, bottom: 10, left: 5, right: 5, name: "all op types",
        breadcrumb: {show: true, top: 0, bottom: null},
        label: {show: true, formatter: "{b}", overflow: "truncate"},
        upperLabel: {show: true, height: 18},
        levels: [{itemStyle: {borderWidth: 2, gapWidth: 2}, colorMappingBy: "index",
                  color: ["#5470c6", "#91cc75", "#fac858", "#ee6666", "#73c0de", "#3ba272",
                          "#fc8452", "#9a60b4", "#ea7ccc"]},
                 {itemStyle: {borderWidth: 1, gapWidth: 1}, colorSaturation: [0.35, 0.6]}]
      }]
    };
  }

  function scopesChart() {
    var total = data.scopes.total.micros, min = total * 0.002;
    function toSun(rows) {
      return rows.filter(function (r) { return r.micros > 0 && r.micros >= min; })
        .map(function (r) {
          return {name: leaf(r.name), full: r.name, value: r.micros, self: r.self.micros,
                  fwd: r.forward_micros, bwd: r.backward_micros,
                  children: toSun(r.children)};
        });
    }
    return {
      tooltip: {formatter: function (p) {
        var d = p.data || {};
        if (!d.full) return "";
        // JAX: the scope's forward and backward pass (folded scopes, docs/views.md).
        var passes = (d.fwd || d.bwd) ? "<br>forward " + fmtUs(d.fwd) + ", backward " +
          fmtUs(d.bwd) : "";
        return "<b>" + esc(d.full) + "</b><br>" + fmtUs(d.value) + " per step (" +
          pct(d.value, total) + "), own ops " + fmtUs(d.self) + passes;
      }},
      series: [{
        type: "sunburst", data: toSun(data.scopes.rows), radius: ["12%", "95%"],
        sort: null, nodeClick: "rootToNode", emphasis: {focus: "ancestor"},
        label: {rotate: "radial", minAngle: 6, overflow: "truncate", fontSize: 10},
        itemStyle: {borderColor: "#fff", borderWidth: 1}
      }]
    };
  }

  function flame(chart, rows, total, rootName, metricOf, selfOf) {
    var items = [], maxDepth = 0, minW = total / 2000;
    function walk(list, depth, x0) {
      var x = x0;
      list.forEach(function (r) {
        var w = metricOf(r);
        if (w > 0 && w >= minW) {
          items.push({value: [x, x + w, depth, items.length], name: r.name, self: selfOf(r), w: w});
          maxDepth = Math.max(maxDepth, depth);
          walk(r.children, depth + 1, x);
        }
        x += w;
      });
    }
    items.push({value: [0, total, 0, 0], name: rootName, self: 0, w: total});
    walk(rows, 1, 0);
    function color(name) {
      if (name === rootName) return "#cbd5e1";
      var grad = name.indexOf("(gradient)") >= 0;
      var h = hash(name);
      return grad ? "hsl(" + (200 + h % 40) + ",60%," + (62 + h % 14) + "%)"
                  : "hsl(" + (h % 50) + ",80%," + (60 + h % 14) + "%)";
    }
    chart.on("click", function (p) {
      var v = p.data.value;
      chart.setOption({xAxis: {min: v[0], max: v[1]}});
    });
    return {
      height: (maxDepth + 2) * 20 + 40,
      option: {
        tooltip: {formatter: function (p) {
          var d = p.data;
          return "<b>" + esc(d.name) + "</b><br>" + fmtUs(d.w) + " per step (" + pct(d.w, total) +
            "), own ops " + fmtUs(d.self);
        }},
        grid: {left: 5, right: 5, top: 5, bottom: 25},
        xAxis: {type: "value", min: 0, max: total, axisLabel: {formatter: fmtUs}},
        yAxis: {type: "value", inverse: true, min: -0.5, max: maxDepth + 0.5, show: false},
        series: [{
          type: "custom", data: items, encode: {x: [0, 1], y: 2},
          renderItem: function (params, api) {
            var d = api.value(2), a = api.coord([api.value(0), d]), b = api.coord([api.value(1), d]);
            var h = api.size([0, 1])[1];
            var cs = params.coordSys;
            var rect = echarts.graphic.clipRectByRect(
              {x: a[0], y: a[1] - h / 2, width: Math.max(b[0] - a[0] - 1, 0.5), height: h - 2},
              {x: cs.x, y: cs.y, width: cs.width, height: cs.height});
            if (!rect) return null;
            var name = items[api.value(3)].name;
            return {
              type: "rect", shape: rect, style: {fill: color(name)},
              textContent: {style: {text: rect.width > 30 ? name : "", fontSize: 11,
                                    overflow: "truncate", width: rect.width - 4, fill: "#111"}},
              textConfig: {position: "insideLeft"}
            };
          }
        }]
      }
    };
  }

  function codeChart() {
    var el = document.getElementById("chart-code");
    if (!el) return;
    var code = data.code;
    var holder = {};
    // The flame's height depends on its depth: compute it before the chart is sized.
    var probe = flame({on: function () {}}, code.rows, code.total.micros, "all code", function (r) {
      return r.micros; }, function (r) { return r.self.micros; });
    draw("code", Math.min(Math.max(probe.height, 200), 1400), function (chart) {
      holder = flame(chart, code.rows, code.total.micros, "all code",
                     function (r) { return r.micros; }, function (r) { return r.self.micros; });
      return holder.option;
    });
  }

  function criticalPathChart() {
    var cp = data.critical_path;
    if (cp.missing) return;
    var ops = cp.ops, t0 = Math.min.apply(null, ops.map(function (o) { return o.start_us; }));
    var names = ops.map(function (o, i) { return (i + 1) + ". " + leaf(o.name); });
    var rows = ops.length, tall = rows > 45;
    draw("critical_path", Math.max(220, Math.min(rows, 45) * 16 + 70), function () {
      return {
        tooltip: {formatter: function (p) {
          var o = ops[p.value[2]];
          return "<b>" + esc(o.name) + "</b><br>" + esc(o.op_type) + " on " + esc(o.device) +
            "<br>" + fmtUs(o.micros) + ", waited " + fmtUs(o.waited_us) + " before it";
        }},
        grid: {left: 220, right: tall ? 50 : 20, top: 10, bottom: 30},
        xAxis: {type: "value", name: "ms", min: 0},
        yAxis: {type: "category", data: names, inverse: true,
                axisLabel: {width: 210, overflow: "truncate", fontSize: 10}},
        dataZoom: tall ? [{type: "slider", yAxisIndex: 0, startValue: 0, endValue: 44, right: 10},
                          {type: "inside", yAxisIndex: 0}] : [],
        series: [{
          type: "custom",
          data: ops.map(function (o, i) {
            return [(o.start_us - t0) / 1000, (o.start_us - t0 + o.micros) / 1000, i];
          }),
          encode: {x: [0, 1], y: 2},
          renderItem: function (params, api) {
            var i = api.value(2), a = api.coord([api.value(0), i]), b = api.coord([api.value(1), i]);
            var h = api.size([0, 1])[1] * 0.7, cs = params.coordSys;
            var rect = echarts.graphic.clipRectByRect(
              {x: a[0], y: a[1] - h / 2, width: Math.max(b[0] - a[0], 1.5), height: h},
              {x: cs.x, y: cs.y, width: cs.width, height: cs.height});
            return rect && {type: "rect", shape: rect,
                            style: {fill: hash(ops[i].op_type) % 2 ? BLUE : "#7c3aed"}};
          }
        }]
      };
    });
  }

  function memoryChart() {
    var mem = data.memory;
    if (mem.missing) return;
    var workers = {};
    mem.series.forEach(function (s) { workers[s.worker] = 1; });
    var multi = Object.keys(workers).length > 1;
    draw("memory", 320, function () {
      return {
        tooltip: {trigger: "axis", valueFormatter: fmtBytes},
        legend: {top: 0},
        grid: {left: 80, right: 30, top: 40, bottom: 40},
        xAxis: {type: "value", name: "ms into step " + mem.step, min: 0},
        yAxis: {type: "value", axisLabel: {formatter: fmtBytes}},
        series: mem.series.map(function (s) {
          return {name: (multi ? s.worker + " " : "") + s.allocator, type: "line", step: "end",
                  showSymbol: false, areaStyle: {opacity: 0.15}, data: s.points};
        })
      };
    });
  }

  // ------------------------------------------------------------------ compare page

  function distributionsChart() {
    var d = data.distributions, step = data.step || {};
    var newColor = step.verdict === "regression" ? RED : step.verdict === "improvement" ? GREEN : BLUE;
    var dots = function (values, cat) {
      return values.map(function (v, i) { return [cat, v / 1000, i]; });
    };
    var box = d.box.map(function (b) { return b && b.map(function (v) { return v / 1000; }); });
    draw("distributions", 360, function () {
      return {
        tooltip: {trigger: "item", formatter: function (p) {
          if (p.seriesType === "boxplot") {
            var v = p.data.value || p.data;
            return esc(p.name) + ": median " + v[3].toFixed(3) + " ms, quartiles " +
              v[2].toFixed(3) + "-" + v[4].toFixed(3) + " ms, range " + v[1].toFixed(3) + "-" +
              v[5].toFixed(3) + " ms";
          }
          return esc(p.value[0]) + " step sample " + (p.value[2] + 1) + ": " + p.value[1].toFixed(3) + " ms";
        }},
        grid: {left: 70, right: 30, top: 20, bottom: 40},
        xAxis: {type: "category", data: ["base", "new"]},
        yAxis: {type: "value", name: "step time (ms)", scale: true},
        series: [
          {type: "boxplot", name: "quartiles", boxWidth: [30, 90],
           data: [{value: box[0] || [], itemStyle: {color: "#e2e8f0", borderColor: GREY}},
                  {value: box[1] || [], itemStyle: {color: "#fee2e2", borderColor: newColor}}]},
          {type: "scatter", name: "base steps", symbolSize: 7, itemStyle: {color: GREY, opacity: 0.7},
           data: dots(d.base, "base")},
          {type: "scatter", name: "new steps", symbolSize: 7, itemStyle: {color: newColor, opacity: 0.7},
           data: dots(d.new, "new")}
        ]
      };
    });
  }

  function scopesMovedChart() {
    var rows = data.scopes;
    if (!rows.length) return;
    var color = {regression: RED, improvement: GREEN};
    var names = rows.map(function (r) { return r.name; });
    var withCi = rows.filter(function (r) { return r.ci_pct; }).length > 0;
    draw("scopes_moved", Math.max(200, rows.length * 22 + 60), function () {
      var series = [{
        type: "bar", name: "change",
        data: rows.map(function (r) {
          var bad = r.verdict === "regression";
          return {value: r.change_pct, row: r,
                  itemStyle: {color: color[r.verdict] || GREY, opacity: bad ? 1 : 0.55,
                              borderColor: bad ? "#7f1d1d" : undefined, borderWidth: bad ? 2 : 0}};
        }),
        label: {show: true, position: "right", formatter: function (p) {
          return (p.value > 0 ? "+" : "") + p.value.toFixed(1) + "%";
        }},
        markLine: {silent: true, symbol: "none", lineStyle: {type: "dashed", color: GREY},
                   data: [{xAxis: data.threshold_pct}, {xAxis: -data.threshold_pct}]}
      }];
      if (withCi) {
        series.push({
          type: "custom", name: "confidence interval",
          data: rows.map(function (r, i) { return r.ci_pct ? [r.ci_pct[0], r.ci_pct[1], i] : [0, 0, i]; }),
          encode: {x: [0, 1], y: 2},
          renderItem: function (params, api) {
            if (!rows[api.value(2)].ci_pct) return null;
            var a = api.coord([api.value(0), api.value(2)]), b = api.coord([api.value(1), api.value(2)]);
            return {type: "line", shape: {x1: a[0], y1: a[1], x2: b[0], y2: b[1]},
                    style: {stroke: "#111", lineWidth: 1.5}};
          }
        });
      }
      return {
        tooltip: {trigger: "item", formatter: function (p) {
          var r = rows[p.dataIndex] || rows[p.value[2]];
          return "<b>" + esc(r.name) + "</b> (" + esc(r.verdict) + ")<br>" +
            (r.base_median_us == null ? "-" : fmtUs(r.base_median_us)) + " → " +
            (r.new_median_us == null ? "-" : fmtUs(r.new_median_us)) + ", change " +
            r.change_pct.toFixed(1) + "%" +
            (r.ci_pct ? " [" + r.ci_pct[0].toFixed(1) + "%, " + r.ci_pct[1].toFixed(1) + "%]" : "") +
            (r.p_value != null ? ", p " + r.p_value.toPrecision(2) : "");
        }},
        grid: {left: 260, right: 70, top: 10, bottom: 30},
        xAxis: {type: "value", name: "%", axisLabel: {formatter: "{value}%"}},
        yAxis: {type: "category", data: names, inverse: true,
                axisLabel: {width: 250, overflow: "truncate", fontSize: 11,
                            formatter: function (v, i) {
                              return rows[i] && rows[i].verdict === "regression" ? "{bad|" + v + "}" : v;
                            },
                            rich: {bad: {color: RED, fontWeight: "bold"}}}},
        series: series
      };
    });
  }

  if (data.page === "run") {
    if (!data.steps.missing) draw("steps", 320, stepsChart);
    if (!data.ops.missing) draw("ops", Math.max(220, Math.min(data.ops.rows.length, 26) * 20 + 50), opsChart);
    draw("op_nodes", 420, opNodesChart);
    if (!data.scopes.missing) draw("scopes", 520, scopesChart);
    if (!data.code.missing) codeChart();
    criticalPathChart();
    memoryChart();
  } else {
    distributionsChart();
    scopesMovedChart();
  }
  window.addEventListener("resize", function () { charts.forEach(function (c) { c.resize(); }); });
  document.documentElement.setAttribute("data-charts-drawn", String(charts.length));
})();
