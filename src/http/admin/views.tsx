import type { Child } from 'hono/jsx';
import { attemptsText, prettyBody, replayMark } from '../../event-text.js';
import type { detailJson, summaryJson } from '../../json/events.js';
import type { replayJson } from '../../json/replay.js';
import type { statsJson } from '../../json/stats.js';
import { printable } from '../../printable.js';
import type { ConflictRow, NearDeliveryId, RouteFailures } from '../../store/ops-types.js';
import { EVENT_ORIGINS, EVENT_STATUSES } from '../../vocabulary.js';
import { DeliveriesChart, type HourBucket } from './chart.js';
import { DEFAULT_SCAN_LIMIT, filtersQuery, type EventFilters } from './filters.js';

/**
 * The admin pages, rendered on the server with Hono's JSX. Every value from an event
 * (ids, types, headers, bodies, errors, effect output) goes in as a JSX child or attribute,
 * which Hono escapes: a stored `<script>` is shown as text. Nothing here uses raw HTML.
 * Before that, each goes through t() or block(): control characters a sender chose (bidi
 * overrides such as U+202E that reorder what follows, C0 and C1 controls) are shown as
 * escapes (`\u202e`), as the CLI shows them (src/printable.ts).
 */

/** Sender-chosen text on one line, its control characters escaped. */
const t = (text: string | null | undefined): string => (text == null ? '' : printable(text));
/** Sender-chosen text that keeps its lines and tabs (a body, effect output). */
const block = (text: string): string => printable(text, { keepLines: true });

type Summary = ReturnType<typeof summaryJson>;
type Detail = ReturnType<typeof detailJson>;
type Stats = ReturnType<typeof statsJson>;
type Replay = ReturnType<typeof replayJson>;

export const ADMIN = '/admin';

/** 2026-11-30 14:02:03Z: every time on these pages is UTC, to the second. */
export function when(iso: string | null): Child {
  if (iso === null) return <span class="muted">—</span>;
  return <time datetime={iso}>{iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z')}</time>;
}

export function age(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 90) return `${s} s`;
  const m = Math.round(s / 60);
  if (m < 90) return `${m} min`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ${m % 60} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

const Status = ({ status }: { status: string }) => <span class={`status status-${status}`}>{status}</span>;

const Csrf = ({ token }: { token: string }) => <input type="hidden" name="csrf" value={token} />;

export function Layout(props: { title: string; csrf?: string | undefined; children?: Child }) {
  return (
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>{`${props.title} · receiver admin`}</title>
        <link rel="stylesheet" href={`${ADMIN}/admin.css`} />
        <link rel="icon" href={`${ADMIN}/favicon.svg`} type="image/svg+xml" />
      </head>
      <body>
        <header>
          <nav aria-label="Admin">
            <span class="brand">receiver admin</span>
            {props.csrf === undefined ? null : (
              <>
                <a href={`${ADMIN}/`}>Overview</a>
                <a href={`${ADMIN}/events`}>Events</a>
                <form method="post" action={`${ADMIN}/logout`}>
                  <Csrf token={props.csrf} />
                  <button type="submit">Log out</button>
                </form>
              </>
            )}
          </nav>
        </header>
        <main>{props.children}</main>
      </body>
    </html>
  );
}

export function LoginPage(props: { next: string; message?: { text: string; bad: boolean } | undefined }) {
  return (
    <Layout title="Log in">
      <div class="login">
        <h1>Log in</h1>
        {props.message === undefined ? null : (
          <p class={props.message.bad ? 'notice bad' : 'notice'} role={props.message.bad ? 'alert' : 'status'}>
            {props.message.text}
          </p>
        )}
        <form method="post" action={`${ADMIN}/login`} class="stack">
          <input type="hidden" name="next" value={props.next} />
          <label for="token">
            Admin token (the value of admin.token in the configuration)
            <input id="token" name="token" type="password" autocomplete="current-password" required autofocus />
          </label>
          <p>
            <button type="submit">Log in</button>
          </p>
        </form>
      </div>
    </Layout>
  );
}

export function MessagePage(props: { title: string; message: string; csrf?: string | undefined }) {
  return (
    <Layout title={props.title} csrf={props.csrf}>
      <h1>{props.title}</h1>
      <p class="notice bad" role="alert">
        {props.message}
      </p>
      <p>
        <a href={`${ADMIN}/`}>Back to the overview</a>
      </p>
    </Layout>
  );
}

/** What an action did, in words, and how it went: sealed into the URL of the page it redirects to. */
export interface Outcome {
  tone: 'good' | 'bad' | 'neutral';
  text: string;
  /** When the action ran (ms): a page reloaded later still says when. */
  at: number;
}

/** What a replay did, in words. */
export function replayOutcome(result: Replay, dead = false): Omit<Outcome, 'at'> {
  if (result.refused.length > 0) {
    const reasons = result.refused.map((r) =>
      r.reason === 'not_found'
        ? `event ${r.id} does not exist (never received, or purged)`
        : r.reason === 'processing'
          ? `event ${r.id} is being processed right now (lease held by ${t(r.leaseOwner ?? 'unknown')} until ${r.leaseExpiresAt ?? 'unknown'}); try again when it finishes`
          : r.reason === 'no_route'
            ? `event ${r.id} has no route "${t(r.route)}" (its routes: ${(r.routes ?? []).map((x) => `"${t(x)}"`).join(', ') || 'none'})`
            : `event ${r.id} has no body any more (dropped by purge --bodies-days), so its effects cannot run again`,
    );
    const shown = reasons.slice(0, 10).join('; ');
    return { tone: 'bad', text: `Nothing was replayed: ${shown}${reasons.length > 10 ? `; and ${reasons.length - 10} more` : ''}.` };
  }
  if (result.replayed.length === 0) return { tone: 'neutral', text: dead ? 'No dead events to replay.' : 'Nothing was replayed.' };
  const forced = result.replayed.some((e) => e.force);
  const one = result.replayed.length === 1 ? result.replayed[0]! : undefined;
  const which =
    one === undefined
      ? `${result.replayed.length} events`
      : `${one.route === undefined ? '' : `route ${t(one.route)} of `}event ${one.id} (was ${one.previousStatus})`;
  return {
    tone: 'good',
    text: `Replayed ${which}: back to pending, with a fresh retry count${one?.route === undefined ? '' : '; its other routes stay as they are'}; the running server drains it within seconds. ${forced ? 'Forced: effects already done run again, recorded as forced.' : 'Effects already done stay skipped.'}`,
  };
}

/** An action's outcome at the top of the page it led to. */
export function OutcomeNotice({ outcome }: { outcome: Outcome | undefined }) {
  if (outcome === undefined) return null;
  return (
    <div class={outcome.tone === 'neutral' ? 'notice' : `notice ${outcome.tone}`} role="status">
      {outcome.text} <span class="muted">({when(new Date(outcome.at).toISOString())})</span>
    </div>
  );
}

function Card({ label, value, href }: { label: string; value: Child; href?: string }) {
  return (
    <div class="card">
      <div class="value">{href === undefined ? value : <a href={href}>{value}</a>}</div>
      <div class="label">{label}</div>
    </div>
  );
}

export interface OverviewData {
  stats: Stats;
  oldestPendingAgeMs: number | null;
  buckets: HourBucket[];
  failures: RouteFailures[];
  now: number;
  /** When serve loaded the running configuration (at start or by its last reload); absent outside serve. */
  configLoadedAt?: number | undefined;
}

export function OverviewPage(props: { data: OverviewData; csrf: string; outcome?: Outcome | undefined }) {
  const { stats: s, failures } = props.data;
  const received = s.events.total + s.duplicates;
  const ratio = received === 0 ? '0 %' : `${((s.duplicates / received) * 100).toFixed(1)} %`;
  return (
    <Layout title="Overview" csrf={props.csrf}>
      <h1>Overview</h1>
      <OutcomeNotice outcome={props.outcome} />
      {props.data.configLoadedAt === undefined ? null : (
        <p class="muted">
          Configuration loaded {when(new Date(props.data.configLoadedAt).toISOString())} ({age(props.data.now - props.data.configLoadedAt)} ago; SIGHUP reloads
          it).
        </p>
      )}
      <section aria-labelledby="counts">
        <h2 id="counts">Events</h2>
        <div class="cards">
          <Card label="events stored" value={s.events.total} href={`${ADMIN}/events`} />
          {EVENT_STATUSES.map((st) => (
            <Card label={st} value={s.events[st]} href={`${ADMIN}/events?status=${st}`} />
          ))}
          <Card label="stuck claims (lease expired)" value={s.stuckClaims.count} />
          <Card label="oldest pending event waits" value={props.data.oldestPendingAgeMs === null ? 'none pending' : age(props.data.oldestPendingAgeMs)} />
          <Card label={`duplicates (${ratio} of deliveries)`} value={s.duplicates} />
          <Card label="conflicting deliveries" value={s.conflicts} />
        </div>
        {s.stuckClaims.count > 0 ? (
          <p class="notice bad">
            {s.stuckClaims.count} event(s) are processing past their lease (the oldest expired {when(s.stuckClaims.oldestLeaseExpiredAt)}): a drain crashed or
            stalled; a running drain takes them back.
          </p>
        ) : null}
        {s.alerts.length > 0 ? (
          <div class="notice bad">
            <p>{s.alerts.length} open alert(s):</p>
            <ul>
              {s.alerts.map((a) => (
                <li>
                  {a.eventId === null ? t(a.summary) : <a href={`${ADMIN}/events/${a.eventId}`}>{t(a.summary)}</a>} (since {when(a.firedAt)})
                </li>
              ))}
            </ul>
          </div>
        ) : null}
        {s.dead > 0 ? (
          <form method="post" action={`${ADMIN}/replay-dead`} class="notice">
            <Csrf token={props.csrf} />
            {s.dead} dead event(s) gave up after their last attempt. <a href={`${ADMIN}/events?status=dead`}>See them</a>, or{' '}
            <button type="submit">Replay all {s.dead} dead events</button> (effects already done stay skipped).
          </form>
        ) : null}
      </section>
      {s.lanes.length === 0 ? null : (
        <section aria-labelledby="lanes">
          <h2 id="lanes">Lanes</h2>
          <table class="stack">
            <caption>Each route runs in a lane, one unit of work (one route of one event) at a time; lanes run side by side.</caption>
            <thead>
              <tr>
                <th scope="col">Lane</th>
                <th scope="col">Routes</th>
                <th scope="col" class="num">
                  Pending
                </th>
                <th scope="col" class="num">
                  Running
                </th>
                <th scope="col">Oldest pending waits</th>
              </tr>
            </thead>
            <tbody>
              {s.lanes.map((l) => (
                <tr>
                  <td class="mono" data-label="Lane">
                    {t(l.lane)}
                  </td>
                  <td class="mono wrap" data-label="Routes">
                    {l.routes.length === 0 ? <span class="muted">not configured any more</span> : l.routes.map(t).join(', ')}
                  </td>
                  <td class="num" data-label="Pending">
                    {l.pending}
                  </td>
                  <td class="num" data-label="Running">
                    {l.running}
                  </td>
                  <td data-label="Oldest pending waits">
                    {l.oldestPendingAgeSeconds === null ? <span class="muted">none pending</span> : age(l.oldestPendingAgeSeconds * 1000)}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
      )}
      <section aria-labelledby="chart">
        <h2 id="chart">Deliveries per hour, last 48 hours</h2>
        <DeliveriesChart buckets={props.data.buckets} />
      </section>
      <section aria-labelledby="failures">
        <h2 id="failures">Effect failures per route, last 48 hours</h2>
        {failures.length === 0 ? (
          <p class="muted">No failed effect attempts.</p>
        ) : (
          <table class="stack">
            <thead>
              <tr>
                <th scope="col">Route</th>
                <th scope="col" class="num">
                  Failed attempts
                </th>
                <th scope="col">Last failure</th>
              </tr>
            </thead>
            <tbody>
              {failures.map((f) => (
                <tr>
                  <td class="mono" data-label="Route">
                    {t(f.route)}
                  </td>
                  <td class="num" data-label="Failed attempts">
                    {f.failures}
                  </td>
                  <td data-label="Last failure">{when(new Date(f.lastFailedAt).toISOString())}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
        <p class="muted">
          Effect ledger: {s.effects.done} done, {s.effects.running} running, {s.effects.failed} failed.
        </p>
      </section>
      <section aria-labelledby="sources">
        <h2 id="sources">Sources</h2>
        <table class="stack">
          <thead>
            <tr>
              <th scope="col">Source</th>
              <th scope="col" class="num">
                Events
              </th>
              <th scope="col">Oldest key</th>
              <th scope="col">Retry horizon</th>
            </tr>
          </thead>
          <tbody>
            {s.sources.map((x) => (
              <tr>
                <td class="mono" data-label="Source">
                  <a href={`${ADMIN}/events?${new URLSearchParams({ source: x.source }).toString()}`}>{t(x.source)}</a>
                  {x.configured ? null : <span class="muted"> (not configured any more)</span>}
                </td>
                <td class="num" data-label="Events">
                  {x.events}
                </td>
                <td data-label="Oldest key">{x.oldestKeyAgeHours === null ? '—' : `${x.oldestKeyAgeHours} h`}</td>
                <td data-label="Retry horizon">
                  {x.retryHorizonHours === null ? '—' : `${x.retryHorizonHours} h`}
                  {x.keysCoverHorizon === false ? <span class="muted"> (keys younger than the horizon)</span> : null}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </section>
    </Layout>
  );
}

/** A summary with the delivery id as its sender shows it. */
export type ListedEvent = Summary & { senderDeliveryId: string };

export function EventsPage(props: {
  filters: EventFilters | undefined;
  error?: string | undefined;
  events: ListedEvent[];
  olderThan: number | undefined;
  sources: string[];
  csrf: string;
  /** The body search read only the newest events: how many. */
  scanLimitReached?: number | undefined;
  /** For a delivery id nothing matched: ids like it. */
  near?: NearDeliveryId[] | undefined;
}) {
  const f = props.filters;
  const input = (v: number | undefined) => (v === undefined ? '' : new Date(v).toISOString().slice(0, 19));
  return (
    <Layout title="Events" csrf={props.csrf}>
      <h1>Events</h1>
      <form method="get" action={`${ADMIN}/events`} class="filters" role="search" aria-label="Filter events">
        <label for="f-delivery">
          Delivery id
          <input id="f-delivery" name="delivery" value={f?.delivery ?? ''} size={28} />
        </label>
        <label for="f-match">
          Match
          <select id="f-match" name="match">
            <option value="exact" selected={f?.match !== 'prefix'}>
              Whole id
            </option>
            <option value="prefix" selected={f?.match === 'prefix'}>
              Starts with
            </option>
          </select>
        </label>
        <label for="f-search">
          Body contains
          <input id="f-search" name="search" value={f?.search ?? ''} size={20} placeholder="an e-mail, an order id" />
        </label>
        <label for="f-source">
          Source
          <input id="f-source" name="source" list="f-sources" value={f?.source ?? ''} size={12} />
          <datalist id="f-sources">
            {props.sources.map((s) => (
              <option value={s}></option>
            ))}
          </datalist>
        </label>
        <label for="f-status">
          Status
          <select id="f-status" name="status">
            <option value="">Any</option>
            {EVENT_STATUSES.map((s) => (
              <option value={s} selected={f?.status === s}>
                {s}
              </option>
            ))}
          </select>
        </label>
        <label for="f-origin">
          Origin
          <select id="f-origin" name="origin">
            <option value="">Any</option>
            {EVENT_ORIGINS.map((o) => (
              <option value={o} selected={f?.origin === o}>
                {o}
              </option>
            ))}
          </select>
        </label>
        <label for="f-type">
          Event type
          <input id="f-type" name="type" value={f?.type ?? ''} size={16} placeholder="exact, or checkout.*" />
        </label>
        <label for="f-from">
          Received from (UTC)
          <input id="f-from" name="from" type="datetime-local" step="1" value={input(f?.from)} />
        </label>
        <label for="f-to">
          Received before (UTC)
          <input id="f-to" name="to" type="datetime-local" step="1" value={input(f?.to)} />
        </label>
        {f === undefined || f.scanLimit === DEFAULT_SCAN_LIMIT ? null : <input type="hidden" name="scan" value={String(f.scanLimit)} />}
        <button type="submit">Filter</button>
        <a href={`${ADMIN}/events`}>Clear</a>
      </form>
      {props.error === undefined ? null : (
        <p class="notice bad" role="alert">
          {props.error}
        </p>
      )}
      {props.scanLimitReached === undefined ? null : (
        <p class="notice" role="status">
          The body search read the bodies of the {props.scanLimitReached} newest events matching the other filters only; older ones were not searched (narrow
          with a received time, the source or the type).
        </p>
      )}
      {props.near === undefined || f?.delivery === undefined ? null : (
        <p class="notice" role="status">
          No event with delivery id <span class="mono">{t(f.delivery)}</span>
          {f.source === undefined ? null : (
            <>
              {' '}
              in <span class="mono">{t(f.source)}</span>
            </>
          )}
          {props.near.length === 0 ? (
            '; no stored delivery id near it among the newest events.'
          ) : (
            <>
              ; near matches:{' '}
              {props.near.map((m, i) => (
                <>
                  {i > 0 ? ', ' : null}
                  <a href={`${ADMIN}/events/${m.id}`} class="mono">
                    {t(`${m.source}/${m.deliveryId}`)}
                  </a>
                </>
              ))}
            </>
          )}
        </p>
      )}
      <table class="stack events">
        <caption>{props.events.length === 0 ? 'No events match.' : `Newest first; ${props.events.length} shown.`}</caption>
        <thead>
          <tr>
            <th scope="col" class="num">
              Id
            </th>
            <th scope="col">Received (UTC)</th>
            <th scope="col">Source</th>
            <th scope="col">Delivery id</th>
            <th scope="col">Type</th>
            <th scope="col">Status</th>
            <th scope="col">Origin</th>
            <th scope="col" class="num">
              Attempts
            </th>
            <th scope="col">Last error</th>
          </tr>
        </thead>
        <tbody>
          {props.events.map((e) => (
            <tr>
              <td class="num" data-label="Id">
                <a href={`${ADMIN}/events/${e.id}`}>{e.id}</a>
              </td>
              <td data-label="Received">{when(e.receivedAt)}</td>
              <td class="mono" data-label="Source">
                {t(e.source)}
              </td>
              <td class="mono wrap" data-label="Delivery id">
                <a href={`${ADMIN}/events/${e.id}`}>{t(e.senderDeliveryId)}</a>
                {e.senderDeliveryId === e.deliveryId ? null : <div class="muted">stored as {t(e.deliveryId)}</div>}
              </td>
              <td class="mono wrap" data-label="Type">
                {t(e.eventType)}
              </td>
              <td data-label="Status">
                <Status status={e.status} />
              </td>
              <td data-label="Origin">{e.origin}</td>
              <td class="num" data-label="Attempts">
                {e.attempts}
              </td>
              <td class="wrap" data-label="Last error">
                {t(e.lastError)}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <nav class="pager" aria-label="Pages">
        {f?.before === undefined ? null : <a href={`${ADMIN}/events?${filtersQuery(f)}`}>Newest events</a>}
        {f === undefined || props.olderThan === undefined ? null : <a href={`${ADMIN}/events?${filtersQuery(f, props.olderThan)}`}>Older events</a>}
      </nav>
    </Layout>
  );
}

const utf8 = new TextDecoder('utf-8', { fatal: false });

/**
 * What can be done to the whole event. Each form posts, and the answer is a redirect
 * back to this page with the outcome (never a page at the POST's own address, which a
 * reload would send again).
 */
function EventActions({ id, csrf }: { id: number; csrf: string }) {
  return (
    <section aria-labelledby="actions">
      <h2 id="actions">Actions</h2>
      <div class="actions">
        <form method="post" action={`${ADMIN}/events/${id}/replay`}>
          <Csrf token={csrf} />
          <p>Put this event back to pending: the drain runs its routes again; effects already done stay skipped.</p>
          <button type="submit">Replay event {id}</button>
        </form>
        <form method="post" action={`${ADMIN}/events/${id}/replay`}>
          <Csrf token={csrf} />
          <input type="hidden" name="force" value="1" />
          <label class="check" for="confirm-force">
            <input id="confirm-force" type="checkbox" name="confirm" value="yes" required />
            <span>
              I understand: force runs again every effect of this event whose key is already done (for example, the licence email is sent a second time). The
              attempts are recorded as forced.
            </span>
          </label>
          <button type="submit" class="danger">
            Replay event {id} with force
          </button>
        </form>
      </div>
    </section>
  );
}

/**
 * Each route's unit of work, with a replay of that route alone (its other routes stay as
 * they are). Force re-sends what that route already did, so it sits behind its own
 * confirmation box, as the event's does.
 */
function UnitsSection({ e, csrf }: { e: Detail; csrf: string }) {
  if (e.units.length === 0) return null;
  const action = `${ADMIN}/events/${e.id}/replay`;
  return (
    <section aria-labelledby="units">
      <h2 id="units">Work per route</h2>
      <table class="stack units">
        <caption>One unit of work per route; the event's status is derived from them. Each route runs in its lane, one unit at a time.</caption>
        <thead>
          <tr>
            <th scope="col">Route</th>
            <th scope="col">Lane</th>
            <th scope="col">Status</th>
            <th scope="col" class="num">
              Attempts
            </th>
            <th scope="col">Next attempt (UTC)</th>
            <th scope="col">Last error</th>
            <th scope="col">Replay</th>
          </tr>
        </thead>
        <tbody>
          {e.units.map((u, i) => (
            <tr>
              <td class="mono" data-label="Route">
                {t(u.route)}
              </td>
              <td class="mono" data-label="Lane">
                {t(u.lane)}
              </td>
              <td data-label="Status">
                <Status status={u.status} />
                {u.status === 'processing' ? (
                  <div class="muted">
                    lease held by {t(u.leaseOwner ?? '?')} until {when(u.leaseExpiresAt)}
                  </div>
                ) : null}
              </td>
              <td class="num" data-label="Attempts">
                {u.attempts}
                {u.replays > 0 ? <span class="muted"> ({u.replays} replay(s))</span> : null}
              </td>
              <td data-label="Next attempt">{u.nextAttemptAt === null ? null : when(u.nextAttemptAt)}</td>
              <td class="wrap" data-label="Last error">
                {t(u.lastError)}
              </td>
              <td class="replay" data-label="Replay">
                <form method="post" action={action}>
                  <Csrf token={csrf} />
                  <input type="hidden" name="route" value={u.route} />
                  <button type="submit">Replay route {t(u.route)}</button>
                </form>
                <details>
                  <summary>With force</summary>
                  <form method="post" action={action}>
                    <Csrf token={csrf} />
                    <input type="hidden" name="route" value={u.route} />
                    <input type="hidden" name="force" value="1" />
                    <label class="check" for={`confirm-force-${i}`}>
                      <input id={`confirm-force-${i}`} type="checkbox" name="confirm" value="yes" required />
                      <span>I understand: force runs this route's effect again even where its key is already done. The attempt is recorded as forced.</span>
                    </label>
                    <button type="submit" class="danger">
                      Replay route {t(u.route)} with force
                    </button>
                  </form>
                </details>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

function AttemptRows({ e }: { e: Detail }) {
  return (
    <>
      {e.attemptLog.map((a, i) => {
        const mark = replayMark(e.attemptLog, i);
        return (
          <>
            {mark === undefined ? null : (
              <tr class="replay-mark">
                <td colspan={6}>{mark[0]!.toUpperCase() + mark.slice(1)}</td>
              </tr>
            )}
            <tr>
              <td class="num" data-label="#">
                {a.number}
              </td>
              <td data-label="Started">{when(a.startedAt)}</td>
              <td class="mono" data-label="Route">
                {t(a.route)}
              </td>
              <td class="mono wrap" data-label="Effect key">
                {t(a.effectKey)}
                {a.runKey === null || a.runKey === a.effectKey ? null : <div class="muted">run key {t(a.runKey)}</div>}
              </td>
              <td data-label="Outcome">
                {a.outcome}
                {a.forced ? ' (forced)' : null}
              </td>
              <td class="wrap" data-label="Error and output">
                {a.error === null ? null : <div>{t(a.error)}</div>}
                {a.output === null || a.output.trim() === '' ? null : <pre aria-label="Effect output">{block(a.output)}</pre>}
              </td>
            </tr>
          </>
        );
      })}
    </>
  );
}

export function EventPage(props: { event: Detail; conflicts: ConflictRow[]; csrf: string; outcome?: Outcome | undefined }) {
  const e = props.event;
  const pretty = prettyBody(e);
  const rawHref = `${ADMIN}/events/${e.id}/body`;
  return (
    <Layout title={`Event ${e.id}`} csrf={props.csrf}>
      <p>
        <a href={`${ADMIN}/events`}>All events</a>
      </p>
      <h1>
        Event {e.id}: <span class="mono">{t(e.source)}</span> / <span class="mono">{t(e.senderDeliveryId)}</span>
      </h1>
      <OutcomeNotice outcome={props.outcome} />
      <dl class="facts">
        <dt>Status</dt>
        <dd>
          <Status status={e.status} />
          {e.status === 'processing' ? (
            <>
              {' '}
              lease held by {t(e.leaseOwner ?? '?')} until {when(e.leaseExpiresAt)}
            </>
          ) : null}
          {e.forceEffects ? ' (replayed with force: effects already done will run again)' : null}
        </dd>
        <dt>Delivery id</dt>
        <dd class="mono">
          {t(e.senderDeliveryId)}
          {e.senderDeliveryId === e.deliveryId ? null : <span class="muted"> (as the sender shows it; stored as {t(e.deliveryId)})</span>}
        </dd>
        <dt>Origin</dt>
        <dd>{e.origin}</dd>
        <dt>Event type</dt>
        <dd class="mono">{t(e.eventType)}</dd>
        <dt>Received</dt>
        <dd>
          {when(e.receivedAt)}
          {e.duplicates > 0 ? `, ${e.duplicates} duplicate(s) since` : null}
        </dd>
        <dt>Attempts</dt>
        <dd>
          {attemptsText(e.attempts, e.attemptLog)}
          {e.status === 'pending' ? <>, next at {when(e.nextAttemptAt)}</> : null}
        </dd>
        <dt>Finished</dt>
        <dd>{when(e.finishedAt)}</dd>
        <dt>Answered</dt>
        <dd>HTTP {e.responseStatus}</dd>
        <dt>Last error</dt>
        <dd>{e.lastError === null ? <span class="muted">none</span> : t(e.lastError)}</dd>
        {e.routeDecisions !== null || (e.status === 'done' && e.attempts === 0) ? (
          <>
            <dt>Routes</dt>
            <dd>
              {e.status === 'done' && e.attempts === 0
                ? 'No route applied to this event when it arrived (stored done; after adding a route, replay it).'
                : null}
              {e.routeDecisions === null ? null : (
                <ul aria-label="Route decisions" class="mono">
                  {e.routeDecisions.map((d) => (
                    <li>{t(d)}</li>
                  ))}
                </ul>
              )}
            </dd>
          </>
        ) : null}
      </dl>

      <UnitsSection e={e} csrf={props.csrf} />

      <EventActions id={e.id} csrf={props.csrf} />

      <section aria-labelledby="headers">
        <h2 id="headers">Headers</h2>
        {e.headers === null ? (
          <p class="muted">Dropped by purge --bodies-days.</p>
        ) : (
          <table class="stack headers">
            <caption>As received; signature and token headers are stored redacted.</caption>
            <tbody>
              {Object.entries(e.headers).map(([k, v]) => (
                <tr>
                  <th scope="row" class="mono wrap">
                    {t(k)}
                  </th>
                  <td class="mono wrap">{t(v)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </section>

      <section aria-labelledby="body">
        <h2 id="body">Body</h2>
        <p class="muted">
          sha256 <span class="mono">{e.bodySha256}</span>
          {e.body === null ? null : (
            <>
              {' · '}
              <a href={rawHref}>Raw bytes</a>
            </>
          )}
        </p>
        {e.body === null ? (
          <p class="muted">Dropped by purge --bodies-days.</p>
        ) : e.bodyEncoding === 'base64' ? (
          <>
            <p>Not UTF-8 text; shown as base64.</p>
            <pre>{e.body}</pre>
          </>
        ) : pretty !== undefined ? (
          <>
            <pre aria-label="Body, pretty-printed JSON">{block(pretty)}</pre>
            <details>
              <summary>Raw body, exactly as received</summary>
              <pre aria-label="Raw body">{block(e.body)}</pre>
            </details>
          </>
        ) : (
          <pre aria-label="Raw body">{block(e.body)}</pre>
        )}
      </section>

      <section aria-labelledby="attempts">
        <h2 id="attempts">Attempts</h2>
        {e.attemptLog.length === 0 ? (
          <p class="muted">None yet.</p>
        ) : (
          <table class="stack">
            <thead>
              <tr>
                <th scope="col" class="num">
                  #
                </th>
                <th scope="col">Started (UTC)</th>
                <th scope="col">Route</th>
                <th scope="col">Effect key</th>
                <th scope="col">Outcome</th>
                <th scope="col">Error and output</th>
              </tr>
            </thead>
            <tbody>
              <AttemptRows e={e} />
            </tbody>
          </table>
        )}
      </section>

      <section aria-labelledby="ledger">
        <h2 id="ledger">Effect ledger</h2>
        {e.effects.length === 0 ? (
          <p class="muted">No ledger rows.</p>
        ) : (
          <table class="stack">
            <thead>
              <tr>
                <th scope="col">Effect key</th>
                <th scope="col">Status</th>
                <th scope="col" class="num">
                  Runs
                </th>
                <th scope="col">Last run by</th>
                <th scope="col">Finished (UTC)</th>
                <th scope="col">Last error</th>
              </tr>
            </thead>
            <tbody>
              {e.effects.map((f) => (
                <tr>
                  <td class="mono wrap" data-label="Effect key">
                    {t(f.effectKey)}
                  </td>
                  <td data-label="Status">{f.status}</td>
                  <td class="num" data-label="Runs">
                    {f.runs}
                    {f.forcedRuns > 0 ? ` (${f.forcedRuns} forced)` : null}
                  </td>
                  <td data-label="Last run by">
                    {f.eventId === null ? '' : f.eventId === e.id ? 'this event' : <a href={`${ADMIN}/events/${f.eventId}`}>event {f.eventId}</a>}
                  </td>
                  <td data-label="Finished">{when(f.finishedAt)}</td>
                  <td class="wrap" data-label="Last error">
                    {t(f.lastError)}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </section>

      {props.conflicts.length === 0 ? null : (
        <section aria-labelledby="conflicts">
          <h2 id="conflicts">Conflicts: the same delivery id with a different body</h2>
          {props.conflicts.map((c) => (
            <div>
              <p>
                First received {when(new Date(c.receivedAt).toISOString())}
                {c.repeats > 0 ? `, ${c.repeats} repeat(s) since` : null}; sha256 <span class="mono">{c.bodySha256}</span>
              </p>
              {c.body === null ? (
                <p class="muted">Body dropped by purge --bodies-days.</p>
              ) : (
                <pre aria-label="Conflicting body">{block(utf8.decode(c.body))}</pre>
              )}
            </div>
          ))}
        </section>
      )}
    </Layout>
  );
}
