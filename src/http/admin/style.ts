/** The admin pages' one stylesheet, served as /admin/admin.css (the CSP allows no inline style). */
export const ADMIN_CSS = `
:root { color-scheme: light; --fg: #1b1f24; --muted: #57606a; --line: #d0d7de; --bg: #fff; --soft: #f6f8fa;
  --done: #2da44e; --waiting: #8c959f; --dead: #cf222e; --conflict: #bf8700; --focus: #0969da; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
header { background: var(--soft); border-bottom: 1px solid var(--line); }
nav { display: flex; flex-wrap: wrap; gap: .4rem 1.2rem; align-items: center; max-width: 72rem; margin: 0 auto; padding: .6rem 1rem; }
nav .brand { font-weight: 600; margin-right: auto; }
nav form { margin: 0; }
main { max-width: 72rem; margin: 0 auto; padding: 1rem; }
h1 { font-size: 1.4rem; margin: .4rem 0 1rem; }
/* Sender-chosen ids and texts may be one long word: broken anywhere rather than widen the page. */
h1, p, li, dd, caption, .notice { overflow-wrap: anywhere; }
h2 { font-size: 1.1rem; margin: 1.6rem 0 .6rem; }
a { color: var(--focus); }
:focus-visible { outline: 3px solid var(--focus); outline-offset: 2px; }
table { border-collapse: collapse; width: 100%; margin: .4rem 0; }
caption { text-align: left; color: var(--muted); padding: .2rem 0; }
th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid var(--line); vertical-align: top; }
td.wrap, th.wrap { overflow-wrap: anywhere; min-width: 8rem; }
tr.replay-mark td { background: var(--soft); color: var(--muted); border-top: 2px solid var(--focus); font-size: 13px; }
th { background: var(--soft); font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 13px; }
pre { background: var(--soft); border: 1px solid var(--line); padding: .6rem; overflow: auto; max-height: 32rem; white-space: pre-wrap; word-break: break-all; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .2rem 1rem; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; overflow-wrap: anywhere; min-width: 0; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(11rem, 1fr)); gap: .6rem; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: .6rem .8rem; }
.card .value { font-size: 1.5rem; font-weight: 600; }
.card .label { color: var(--muted); }
.status { white-space: nowrap; display: inline-block; padding: 0 .45rem; border-radius: 1rem; font-size: 13px; border: 1px solid currentColor; }
.status-done { color: #1a7f37; } .status-dead { color: var(--dead); } .status-pending, .status-processing { color: var(--muted); }
.notice { border: 1px solid var(--line); border-left: 4px solid var(--focus); padding: .5rem .8rem; margin: .8rem 0; background: var(--soft); }
.notice.bad { border-left-color: var(--dead); }
.notice.good { border-left-color: var(--done); }
form.filters { display: flex; flex-wrap: wrap; gap: .6rem 1rem; align-items: flex-end; margin-bottom: 1rem; }
form.filters label, form.stack label { display: flex; flex-direction: column; font-size: 13px; color: var(--muted); gap: .15rem; max-width: 100%; }
form.filters input, form.filters select { max-width: 100%; }
input, select, button { font: inherit; padding: .3rem .5rem; border: 1px solid var(--line); border-radius: 4px; color: var(--fg); background: var(--bg); }
button { cursor: pointer; background: var(--soft); }
button.danger { border-color: var(--dead); color: var(--dead); }
form.inline { display: inline; }
.actions { display: flex; flex-wrap: wrap; gap: 1.5rem; align-items: flex-start; }
.actions form { border: 1px solid var(--line); border-radius: 6px; padding: .6rem .8rem; max-width: 30rem; }
label.check { display: flex; gap: .5rem; align-items: flex-start; margin: .4rem 0; }
td.replay form { margin: 0 0 .3rem; }
td.replay details { max-width: 22rem; }
td.replay summary { cursor: pointer; color: var(--muted); font-size: 13px; }
.pager { display: flex; gap: 1.5rem; margin: .8rem 0; }
.muted { color: var(--muted); }
figure { margin: 0; }
svg.chart { width: 100%; height: auto; max-height: 260px; }
svg.chart .axis { stroke: var(--line); }
svg.chart text { fill: var(--muted); font-size: 11px; }
.c-done { fill: var(--done); background: var(--done); } .c-waiting { fill: var(--waiting); background: var(--waiting); }
.c-dead { fill: var(--dead); background: var(--dead); } .c-conflict { fill: var(--conflict); background: var(--conflict); }
ul.legend { list-style: none; display: flex; gap: 1rem; padding: 0; margin: .3rem 0; }
ul.legend span { display: inline-block; width: .8rem; height: .8rem; margin-right: .3rem; vertical-align: -1px; }
.login { max-width: 26rem; margin: 4rem auto; }
.login input { width: 100%; }
/* A phone: a wide table becomes one block per row, each cell named by its column. */
@media (max-width: 40rem) {
  main { padding: .6rem; }
  table.stack thead { display: none; }
  table.stack, table.stack tbody, table.stack tr, table.stack td, table.stack th, table.stack caption { display: block; width: 100%; }
  table.stack th { border: 0; background: none; padding: .1rem .3rem 0; }
  table.stack td[data-label]:empty { display: none; }
  table.stack tr { border-bottom: 1px solid var(--line); padding: .3rem 0; }
  table.stack td { border: 0; padding: .1rem .3rem; min-width: 0; }
  table.stack td.num { text-align: left; }
  table.stack td[data-label]::before { content: attr(data-label) ": "; color: var(--muted); font: 13px system-ui, sans-serif; }
  dl.facts { grid-template-columns: 1fr; gap: 0; }
  dl.facts dd { margin-bottom: .4rem; }
  .actions form { max-width: 100%; }
}
`;

/** The pages' icon: a small inbox tray. */
export const ADMIN_ICON = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#0969da"/><path d="M3 9h3l1 2h2l1-2h3v3H3z" fill="#fff"/></svg>`;
