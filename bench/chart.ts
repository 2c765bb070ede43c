/**
 * Small SVG line charts: p99 latency (log scale) against offered load, one line per scenario; and
 * the memory scenario's RSS and heap (linear scale) over the fill. Hand-written so the report needs
 * nothing outside this repository.
 */

export interface Series {
  readonly label: string;
  /** [x, y]: offered requests per second and p99 ms; users checked and MiB */
  readonly points: ReadonlyArray<readonly [number, number]>;
}

const PALETTE = ["#444444", "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"];

interface ChartOptions {
  readonly title: string;
  readonly xLabel: string;
  readonly yLabel: string;
  readonly series: readonly Series[];
}

/** p99 against offered load: a log y axis, since one slow scenario would flatten the others. */
export function lineChart(options: ChartOptions): string {
  return chart(options, "log");
}

/** Memory over the fill: a linear y axis from 0, so the lines' heights compare as sizes. */
export function memoryChart(options: ChartOptions): string {
  return chart(options, "linear");
}

function chart(options: ChartOptions, yScale: "log" | "linear"): string {
  const width = 820;
  const height = 480;
  const m = { left: 70, right: 210, top: 40, bottom: 55 };
  const plotW = width - m.left - m.right;
  const plotH = height - m.top - m.bottom;
  const all = options.series.flatMap((s) => s.points).filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y) && y > 0);
  const xMax = niceCeil(Math.max(1, ...all.map(([x]) => x)));
  const yMinRaw = Math.min(...all.map(([, y]) => y), 1);
  const yMaxRaw = Math.max(...all.map(([, y]) => y), 1);
  const log = yScale === "log";
  const yMin = log ? 10 ** Math.floor(Math.log10(yMinRaw)) : 0;
  const yMax = log ? 10 ** Math.ceil(Math.log10(yMaxRaw)) : niceCeil(yMaxRaw);
  const sx = (x: number) => m.left + (x / xMax) * plotW;
  const sy = log
    ? (y: number) => m.top + plotH - ((Math.log10(y) - Math.log10(yMin)) / (Math.log10(yMax) - Math.log10(yMin))) * plotH
    : (y: number) => m.top + plotH - (y / yMax) * plotH;
  const yTicks = log
    ? Array.from({ length: Math.log10(yMax) - Math.log10(yMin) + 1 }, (_, i) => 10 ** (Math.log10(yMin) + i))
    : Array.from({ length: 6 }, (_, i) => (yMax / 5) * i);

  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="#ffffff"/>`,
    `<text x="${m.left}" y="22" font-size="15" font-weight="bold">${esc(options.title)}</text>`,
  );
  // Grid and axes.
  for (let i = 0; i <= 5; i++) {
    const x = (xMax / 5) * i;
    out.push(
      `<line x1="${sx(x)}" y1="${m.top}" x2="${sx(x)}" y2="${m.top + plotH}" stroke="#e5e5e5"/>`,
      `<text x="${sx(x)}" y="${m.top + plotH + 18}" text-anchor="middle">${fmt(x)}</text>`,
    );
  }
  for (const y of yTicks) {
    out.push(
      `<line x1="${m.left}" y1="${sy(y)}" x2="${m.left + plotW}" y2="${sy(y)}" stroke="#e5e5e5"/>`,
      `<text x="${m.left - 8}" y="${sy(y) + 4}" text-anchor="end">${fmt(y)}</text>`,
    );
  }
  out.push(
    `<rect x="${m.left}" y="${m.top}" width="${plotW}" height="${plotH}" fill="none" stroke="#999999"/>`,
    `<text x="${m.left + plotW / 2}" y="${height - 12}" text-anchor="middle">${esc(options.xLabel)}</text>`,
    `<text transform="translate(18 ${m.top + plotH / 2}) rotate(-90)" text-anchor="middle">${esc(options.yLabel)}</text>`,
  );
  options.series.forEach((s, i) => {
    const color = PALETTE[i % PALETTE.length]!;
    const pts = s.points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y) && y > 0).toSorted((a, b) => a[0] - b[0]);
    if (pts.length > 0) {
      out.push(
        `<polyline fill="none" stroke="${color}" stroke-width="2" points="${pts.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" ")}"/>`,
        ...pts.map(([x, y]) => `<circle cx="${sx(x).toFixed(1)}" cy="${sy(y).toFixed(1)}" r="3.5" fill="${color}"/>`),
      );
    }
    const ly = m.top + 10 + i * 20;
    out.push(
      `<line x1="${m.left + plotW + 15}" y1="${ly}" x2="${m.left + plotW + 35}" y2="${ly}" stroke="${color}" stroke-width="2"/>`,
      `<text x="${m.left + plotW + 40}" y="${ly + 4}">${esc(s.label)}</text>`,
    );
  });
  out.push("</svg>");
  return `${out.join("\n")}\n`;
}

function niceCeil(v: number): number {
  const p = 10 ** Math.floor(Math.log10(v));
  for (const f of [1, 2, 2.5, 5, 10]) if (f * p >= v) return f * p;
  return 10 * p;
}

function fmt(v: number): string {
  if (v >= 1000) return `${Number((v / 1000).toFixed(1))}k`;
  if (v >= 1) return String(Number(v.toFixed(1)));
  return String(Number(v.toPrecision(2)));
}

function esc(s: string): string {
  return s.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;");
}
