/**
 * Where a JSON text stops being JSON, as a line and column an editor can jump to. JSON.parse
 * names a character offset for most syntax errors ("... in JSON at position 57"); for an
 * unexpected token ("Unexpected token 'N', "..." is not valid JSON") it names the token and
 * the text around it, not where it is. JSON.parse finds that offset too: see
 * firstErrorOffset.
 */

export interface JsonSyntaxError {
  line: number;
  column: number;
  /** What JSON.parse said, without the offset or the quoted text. */
  reason: string;
}

/** JSON.parse's error on `text`, located: 1-based line and column. */
export function locateJsonError(text: string, error: Error): JsonSyntaxError {
  const message = error.message;
  const offset = positionIn(message) ?? firstErrorOffset(text);
  let reason = message.replace(/ at position \d+.*$/s, '').replace(/ in JSON$/, '');
  // "Unexpected token 'X', "<the text around it>" is not valid JSON": the quoted text may hold line breaks; the character is named instead.
  if (/^Unexpected token/.test(reason) && /is not valid JSON$/.test(reason)) reason = `Unexpected character ${JSON.stringify(text[offset] ?? '')}`;
  if (reason === 'Unexpected end of JSON input') reason = 'unexpected end of the file (a missing closing } or ], or a cut-off string)';
  return { ...lineAndColumn(text, offset), reason };
}

/** 1-based line and column of a character offset (a tab counts as one column). */
function lineAndColumn(text: string, offset: number): { line: number; column: number } {
  const before = text.slice(0, Math.max(0, Math.min(offset, text.length)));
  const lines = before.split('\n');
  return { line: lines.length, column: (lines[lines.length - 1]?.length ?? 0) + 1 };
}

/** The offset a JSON.parse message names ("... at position 57"), if it names one. */
function positionIn(message: string): number | undefined {
  const at = /\bat position (\d+)/.exec(message);
  return at === null ? undefined : Number(at[1]);
}

/**
 * Whether JSON.parse refuses `prefix` for a character in it, rather than because it ends
 * too early ("Unexpected end of JSON input", or an error at the position just past its end).
 */
function failsBeforeEnd(prefix: string): boolean {
  try {
    JSON.parse(prefix);
    return false;
  } catch (e) {
    const message = (e as Error).message;
    const at = positionIn(message);
    return at !== undefined ? at < prefix.length : message !== 'Unexpected end of JSON input';
  }
}

/**
 * The offset of the first character that is not valid JSON, or the text's length when it
 * only ends too early. JSON.parse reads left to right and stops at that character, so a
 * beginning of the text fails before its end exactly when it holds the character: a binary
 * search over the beginnings finds it, with JSON.parse as the parser (about log2(length)
 * parses, and only for a text JSON.parse has already refused).
 */
function firstErrorOffset(text: string): number {
  if (!failsBeforeEnd(text)) return text.length;
  // failsBeforeEnd(text.slice(0, lo)) is false, failsBeforeEnd(text.slice(0, hi)) is true.
  let lo = 0;
  let hi = text.length;
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (failsBeforeEnd(text.slice(0, mid))) hi = mid;
    else lo = mid;
  }
  return hi - 1;
}
