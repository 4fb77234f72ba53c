/** A `database` setting that names a PostgreSQL server (a postgres:// or postgresql:// URL) rather than a SQLite file. */
export function isPostgresUrl(database: string): boolean {
  return /^postgres(ql)?:\/\//.test(database);
}
