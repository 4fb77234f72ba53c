/**
 * Templates used by route keys, versions, filters and delivery ids:
 * `{body.a.b}`, `{header.x-name}`, `{source}`, `{type}`, `{id}`, with literal text around them.
 * A template resolves to undefined when any placeholder is missing or empty: the caller
 * reports that as a failure, never as a silent skip.
 */
export interface TemplateContext {
  /** The parsed body (JSON, or form fields), or undefined when it does not parse. */
  body: unknown;
  headers: Readonly<Record<string, string>>;
  source: string;
  type?: string;
  /** The event id (a number once stored) or delivery id. */
  id?: string | number;
}

const PLACEHOLDER = /\{([^{}]+)\}/g;

function templateFields(template: string): string[] {
  return [...template.matchAll(PLACEHOLDER)].map((m) => m[1] ?? '');
}

/** Checks a template's placeholders; returns a problem, or undefined when it is fine. */
export function checkTemplate(template: string): string | undefined {
  const fields = templateFields(template);
  if (fields.length === 0) return `"${template}" has no {placeholder}; every event would get the same key`;
  for (const f of fields) {
    if (!/^(body(\.[^.]+)+|header\.[A-Za-z0-9_-]+|source|type|id)$/.test(f)) {
      return `"{${f}}" is not a placeholder; use {body.path}, {header.name}, {source}, {type} or {id}`;
    }
  }
  return undefined;
}

export function lookup(path: string, ctx: TemplateContext): unknown {
  if (path === 'source') return ctx.source;
  if (path === 'type') return ctx.type;
  if (path === 'id') return ctx.id;
  // Own properties only: `{body.constructor}` or `{header.tostring}` must not find what
  // every object inherits (a filter on it would match the wrong events).
  if (path.startsWith('header.')) {
    const name = path.slice(7).toLowerCase();
    return Object.hasOwn(ctx.headers, name) ? ctx.headers[name] : undefined;
  }
  if (path.startsWith('body.')) {
    let cur: unknown = ctx.body;
    for (const key of path.slice(5).split('.')) {
      if (cur === null || typeof cur !== 'object' || !Object.hasOwn(cur, key)) return undefined;
      cur = (cur as Record<string, unknown>)[key];
    }
    return cur;
  }
  return undefined;
}

function scalar(value: unknown): string | undefined {
  if (typeof value === 'string') return value === '' ? undefined : value;
  if (typeof value === 'number') return Number.isFinite(value) ? String(value) : undefined;
  if (typeof value === 'boolean') return String(value);
  return undefined;
}

export function resolveTemplate(template: string, ctx: TemplateContext): string | undefined {
  let missing = false;
  const out = template.replace(PLACEHOLDER, (_, path: string) => {
    const v = scalar(lookup(path, ctx));
    if (v === undefined) missing = true;
    return v ?? '';
  });
  return missing ? undefined : out;
}

/** A route filter: every `path: value` pair must equal the event's value at that path. */
export function matchesFilter(filter: Readonly<Record<string, string | number | boolean | null>>, ctx: TemplateContext): boolean {
  for (const [path, want] of Object.entries(filter)) {
    const got = lookup(path, ctx);
    if (want === null ? got !== null && got !== undefined : got !== want) return false;
  }
  return true;
}

/** `invoice.*` style globs on event types; `*` matches any run of characters. */
export function globMatch(glob: string, value: string): boolean {
  if (glob === '*') return true;
  let re = globs.get(glob);
  if (re === undefined) {
    re = new RegExp(
      `^${glob
        .split('*')
        .map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
        .join('.*')}$`,
    );
    globs.set(glob, re);
  }
  return re.test(value);
}

/** Compiled globs: they come from the configuration, so the map stays as small as it is. */
const globs = new Map<string, RegExp>();

/** Parses a raw body for templates: JSON first, then form fields; undefined otherwise. */
export function parseBody(raw: Buffer, contentType = ''): unknown {
  const text = raw.toString('utf8');
  try {
    return JSON.parse(text);
  } catch {
    if (contentType.includes('application/x-www-form-urlencoded') || /^[^=&\s]+=[^&\s]*(&[^=&\s]+=[^&\s]*)*$/.test(text)) {
      // No prototype: a field named `__proto__` is a field like any other.
      const form: Record<string, string> = Object.create(null) as Record<string, string>;
      for (const [k, v] of new URLSearchParams(text)) form[k] = v;
      // Slack interactivity wraps its JSON in a `payload` form field.
      if (typeof form.payload === 'string') {
        try {
          return { ...form, payload: JSON.parse(form.payload) };
        } catch {
          return form;
        }
      }
      return form;
    }
    return undefined;
  }
}
