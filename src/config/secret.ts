import { readFileSync } from 'node:fs';
import { inspect } from 'node:util';
import { configError } from '../errors.js';

/**
 * How the configuration, the environment file and `file:` secrets are read: this process's
 * own reads, or (serve reloading after it became the service's user) the privileged
 * reader's snapshot of them (src/config/reader.ts). Throws an error with an errno `code`.
 */
export type ReadText = (path: string) => string;

export const readText: ReadText = (path) => readFileSync(path, 'utf8');

/**
 * A resolved secret. It never prints itself: String(), JSON, util.inspect and pino all
 * see "[secret]". Only verifiers and signers call reveal().
 */
export class Secret {
  readonly #value: string;

  /**
   * `file`: the file it was read from (a `file:` reference) and the field that named it,
   * for the warning about a file others can read (see secret-files.ts).
   */
  constructor(
    value: string,
    readonly file?: { path: string; field: string },
  ) {
    this.#value = value;
  }

  reveal(): string {
    return this.#value;
  }

  toString(): string {
    return '[secret]';
  }

  toJSON(): string {
    return '[secret]';
  }

  [inspect.custom](): string {
    return '[secret]';
  }
}

/**
 * Resolves a secret reference: `env:NAME`, `file:PATH` or a literal.
 * `field` names the config field in errors, e.g. `sources.stripe.secret`.
 */
export function resolveSecret(ref: string, field: string, env: NodeJS.ProcessEnv = process.env, read: ReadText = readText): Secret {
  if (ref.startsWith('env:')) {
    const name = ref.slice(4);
    // Own properties only: `env:toString` must not find Object.prototype.toString.
    const value = Object.hasOwn(env, name) ? env[name] : undefined;
    if (value === undefined || value === '') {
      throw configError(
        `${field}: environment variable ${name} is not set or empty`,
        `export ${name}=<the signing secret>, or put it in the systemd EnvironmentFile`,
      );
    }
    if (isBlank(value)) throw configError(`${field}: environment variable ${name} holds only whitespace`, `export ${name}=<the signing secret>`);
    return new Secret(value);
  }
  if (ref.startsWith('file:')) {
    const path = ref.slice(5);
    let value: string;
    try {
      value = read(path);
    } catch (e) {
      throw configError(
        `${field}: cannot read secret file ${path} (${(e as NodeJS.ErrnoException).code ?? 'error'})`,
        `create ${path} containing the secret, readable by the receiver's user`,
      );
    }
    // Editors and `echo` add a trailing newline that is not part of the secret.
    value = value.replace(/\r?\n$/, '');
    if (value === '') throw configError(`${field}: secret file ${path} is empty`, `write the secret into ${path}`);
    if (isBlank(value)) throw configError(`${field}: secret file ${path} holds only whitespace`, `write the secret into ${path}`);
    return new Secret(value, { path, field });
  }
  if (ref === '') throw configError(`${field}: secret is empty`, 'set a literal secret, env:NAME or file:PATH');
  if (isBlank(ref)) throw configError(`${field}: secret is only whitespace`, 'set the literal secret the sender shows, env:NAME or file:PATH');
  return new Secret(ref);
}

/**
 * A secret of only whitespace is a mistake (an unfilled template, a stray space), never a
 * key: anyone could sign with it. Refused when the configuration is loaded.
 */
export function isBlank(value: string): boolean {
  return value.trim() === '';
}
