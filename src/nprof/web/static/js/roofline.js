// roofline.js — draws the roofline chart of GET /profiles/{id}/roofline on a canvas: log-log axes
// (arithmetic intensity FLOP/B × achieved FLOP/s), the memory roof (HBM bandwidth × intensity) up to
// the ridge point and the compute roof (peak FLOP/s) after it; the run as a large dot, each layer as
// a small one (hover names it through the canvas title). Contract: drawRoofline(canvas, roof) -> the
// drawn points [{name, x, y}] (CSS px, a test hook stored on canvas.points).

const PAD = { l: 64, r: 16, t: 12, b: 36 };

function fmtSI(v) {
  const units = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (const [s, u] of units) if (v >= s) return `${+(v / s).toPrecision(3)}${u}`;
  return `${+v.toPrecision(3)}`;
}

export function drawRoofline(canvas, roof) {
  const W = canvas.width;
  const H = canvas.height;
  const g = canvas.getContext("2d");
  const pts = [roof.run, ...roof.layers].filter((p) => p.intensity > 0 && p.achieved > 0);
  const ridge = roof.peak_flops / roof.hbm_bandwidth;
  const xs = [ridge, ...pts.map((p) => p.intensity)];
  const ys = [roof.peak_flops, ...pts.map((p) => p.achieved)];
  const x0 = Math.log10(Math.min(...xs)) - 1;
  const x1 = Math.log10(Math.max(...xs)) + 1;
  const y0 = Math.log10(Math.min(...ys, roof.hbm_bandwidth * 10 ** x0)) - 0.5;
  const y1 = Math.log10(Math.max(...ys)) + 0.5;
  const X = (v) => PAD.l + ((Math.log10(v) - x0) / (x1 - x0)) * (W - PAD.l - PAD.r);
  const Y = (v) => H - PAD.b - ((Math.log10(v) - y0) / (y1 - y0)) * (H - PAD.t - PAD.b);
  g.clearRect(0, 0, W, H);
  g.font = "11px system-ui, sans-serif";
  g.fillStyle = "#5b6472";
  g.strokeStyle = "#e6e8ec";
  for (let e = Math.ceil(x0); e <= x1; e += 1) {
    g.beginPath();
    g.moveTo(X(10 ** e), PAD.t);
    g.lineTo(X(10 ** e), H - PAD.b);
    g.stroke();
    g.fillText(fmtSI(10 ** e), X(10 ** e) - 8, H - PAD.b + 14);
  }
  for (let e = Math.ceil(y0); e <= y1; e += 1) {
    g.beginPath();
    g.moveTo(PAD.l, Y(10 ** e));
    g.lineTo(W - PAD.r, Y(10 ** e));
    g.stroke();
    g.fillText(fmtSI(10 ** e), 8, Y(10 ** e) + 4);
  }
  g.fillText("arithmetic intensity (FLOP / HBM byte)", W / 2 - 90, H - 6);
  g.fillText("FLOP/s", 8, PAD.t + 2);
  g.strokeStyle = "#c2457a";
  g.lineWidth = 2;
  g.beginPath();
  g.moveTo(X(10 ** x0), Y(roof.hbm_bandwidth * 10 ** x0));
  g.lineTo(X(ridge), Y(roof.peak_flops));
  g.stroke();
  g.strokeStyle = "#3b6fd8";
  g.beginPath();
  g.moveTo(X(ridge), Y(roof.peak_flops));
  g.lineTo(X(10 ** x1), Y(roof.peak_flops));
  g.stroke();
  g.lineWidth = 1;
  g.fillStyle = "#3b6fd8";
  g.fillText(`peak ${fmtSI(roof.peak_flops)}FLOP/s`, X(ridge) + 6, Y(roof.peak_flops) - 6);
  g.fillStyle = "#c2457a";
  g.fillText(`HBM ${fmtSI(roof.hbm_bandwidth)}B/s`, PAD.l + 6, Y(roof.hbm_bandwidth * 10 ** x0) - 8);
  const drawn = [];
  for (const p of pts) {
    const run = p === roof.run;
    const x = X(p.intensity);
    const y = Y(p.achieved);
    g.fillStyle = run ? "#111" : "rgba(224, 138, 30, 0.85)";
    g.beginPath();
    g.arc(x, y, run ? 6 : 3.5, 0, 2 * Math.PI);
    g.fill();
    if (run) g.fillText("run", x + 8, y + 4);
    drawn.push({ name: p.name, x, y });
  }
  canvas.title = pts.map((p) => `${p.name}: ${fmtSI(p.intensity)} FLOP/B, ${fmtSI(p.achieved)}FLOP/s`).slice(0, 30).join("\n");
  canvas.points = drawn;
  return drawn;
}
