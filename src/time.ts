import { ReceiverError } from './errors.js';

/**
 * A time as a person types it: as a form's datetime-local field sends it
 * (`2026-11-30T14:02`, read as UTC, as every time on the admin pages and in the CLI's
 * output is shown), a date, or ISO 8601 with a zone. The admin's filters and the CLI's
 * --since/--until read times with it; a bad one is a `usage` error naming `name`.
 */
export function parseTime(name: string, text: string): number {
  let t = text.trim();
  if (/^\d{4}-\d{2}-\d{2}$/.test(t)) t += 'T00:00Z';
  else if (/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?$/.test(t)) t += 'Z';
  else if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?(Z|[+-]\d{2}:\d{2})$/.test(t)) {
    throw new ReceiverError('usage', `${name}: "${text}" is not a time (use 2026-11-30T14:02 in UTC, or ISO 8601 with a zone)`);
  }
  const ms = Date.parse(t);
  if (!Number.isFinite(ms)) throw new ReceiverError('usage', `${name}: "${text}" is not a valid time`);
  return ms;
}
