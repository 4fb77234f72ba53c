import type { HourlyDeliveries } from '../../store/ops-types.js';

const HOUR_MS = 3_600_000;
export const CHART_HOURS = 48;

/** What the chart stacks, bottom up. Processing joins pending: both still wait for their effects. */
export const SERIES = [
  { key: 'done', label: 'Done' },
  { key: 'waiting', label: 'Pending or processing' },
  { key: 'dead', label: 'Dead' },
  { key: 'conflict', label: 'Conflicting deliveries' },
] as const;

type SeriesKey = (typeof SERIES)[number]['key'];

export interface HourBucket {
  hour: number;
  counts: Record<SeriesKey, number>;
}

/** The last `CHART_HOURS` hours (the current one last), every hour present, zero when empty. */
export function hourBuckets(rows: readonly HourlyDeliveries[], now: number): HourBucket[] {
  const last = Math.floor(now / HOUR_MS) * HOUR_MS;
  const first = last - (CHART_HOURS - 1) * HOUR_MS;
  const buckets: HourBucket[] = [];
  for (let h = first; h <= last; h += HOUR_MS) buckets.push({ hour: h, counts: { done: 0, waiting: 0, dead: 0, conflict: 0 } });
  for (const r of rows) {
    const b = buckets[(r.hour - first) / HOUR_MS];
    if (b === undefined) continue;
    const key: SeriesKey = r.outcome === 'pending' || r.outcome === 'processing' ? 'waiting' : r.outcome;
    b.counts[key] += r.count;
  }
  return buckets;
}

/** 1, 2, 5, 10, 20, 50...: an axis maximum a reader can count with. */
function niceMax(n: number): number {
  if (n <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(n));
  return ([1, 2, 5, 10].find((m) => m * p >= n) ?? 10) * p;
}

const hourLabel = (ms: number) => `${new Date(ms).toISOString().slice(11, 13)}:00`;
const total = (b: HourBucket) => SERIES.reduce((s, x) => s + b.counts[x.key], 0);

/**
 * Deliveries per hour as an inline SVG, drawn on the server: stacked bars, a title per bar
 * segment (the browser's tooltip, no script), and the same figures as a table for screen
 * readers and for copying.
 */
export function DeliveriesChart({ buckets }: { buckets: HourBucket[] }) {
  const W = 960;
  const H = 240;
  const left = 44;
  const right = 8;
  const top = 10;
  const bottom = 28;
  const plotW = W - left - right;
  const plotH = H - top - bottom;
  const max = niceMax(Math.max(0, ...buckets.map(total)));
  const barW = plotW / buckets.length;
  const y = (v: number) => top + plotH - (v / max) * plotH;
  const sum = buckets.reduce((s, b) => s + total(b), 0);
  return (
    <figure>
      <svg class="chart" viewBox={`0 0 ${W} ${H}`} role="img" aria-labelledby="chart-title">
        <title id="chart-title">{`Deliveries per hour over the last ${CHART_HOURS} hours, by outcome: ${sum} in all`}</title>
        {[0, max / 2, max].filter(Number.isInteger).map((v) => (
          <g>
            <line class="axis" x1={left} x2={W - right} y1={y(v)} y2={y(v)} />
            <text x={left - 6} y={y(v) + 4} text-anchor="end">
              {String(v)}
            </text>
          </g>
        ))}
        {buckets.map((b, i) => {
          let base = 0;
          return (
            <g>
              {SERIES.map((s) => {
                const n = b.counts[s.key];
                if (n === 0) return null;
                const y0 = y(base);
                base += n;
                const y1 = y(base);
                return (
                  <rect
                    class={`c-${s.key}`}
                    x={(left + i * barW + 1).toFixed(1)}
                    width={Math.max(1, barW - 2).toFixed(1)}
                    y={y1.toFixed(1)}
                    height={Math.max(0.5, y0 - y1).toFixed(1)}
                  >
                    <title>{`${hourLabel(b.hour)} UTC: ${n} ${s.label.toLowerCase()}`}</title>
                  </rect>
                );
              })}
              {i % 6 === 0 ? (
                <text x={left + i * barW + barW / 2} y={H - 8} text-anchor="middle">
                  {hourLabel(b.hour)}
                </text>
              ) : null}
            </g>
          );
        })}
      </svg>
      <figcaption>
        <ul class="legend">
          {SERIES.map((s) => (
            <li>
              <span class={`c-${s.key}`} aria-hidden="true"></span>
              {s.label}
            </li>
          ))}
        </ul>
        Hours in UTC; an event counts in the hour it arrived, under what became of it.
      </figcaption>
      <details>
        <summary>The chart's figures as a table</summary>
        <table>
          <caption>Deliveries per hour (UTC)</caption>
          <thead>
            <tr>
              <th scope="col">Hour</th>
              {SERIES.map((s) => (
                <th scope="col" class="num">
                  {s.label}
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {buckets
              .filter((b) => total(b) > 0)
              .map((b) => (
                <tr>
                  <th scope="row">{new Date(b.hour).toISOString().slice(0, 13).replace('T', ' ')}:00</th>
                  {SERIES.map((s) => (
                    <td class="num">{b.counts[s.key]}</td>
                  ))}
                </tr>
              ))}
          </tbody>
        </table>
      </details>
    </figure>
  );
}
