// Text a sender chose, made safe to show on a terminal: used by the CLI's text output and
// by the pretty log lines alike.

/**
 * Characters a terminal acts on rather than shows: C0 controls (ESC starts an escape
 * sequence), DEL, C1 controls (U+009B is a one-character CSI) and the bidirectional
 * overrides that reorder what follows them.
 */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/** The ones JSON.stringify leaves raw (it escapes C0 itself; its own newlines are layout). */
export const CONTROL_IN_JSON = /[\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

const escapeChar = (ch: string) => {
  const code = ch.charCodeAt(0);
  return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
};

/**
 * Sender-chosen text (delivery ids, event types, headers, bodies, errors, effect keys)
 * for text output: control characters become visible escapes (`\x1b`, `\u202e`), so what a
 * sender put in an id cannot move the cursor, rewrite earlier lines or retitle the
 * terminal of the operator reading it. `keepLines` keeps newlines and tabs (a body).
 */
export function printable(text: string, { keepLines = false }: { keepLines?: boolean } = {}): string {
  return text.replace(CONTROL, (ch) => (keepLines && (ch === '\n' || ch === '\t') ? ch : escapeChar(ch)));
}
