#!/bin/sh
# /usr/local/bin/receiver: receiver's CLI for the operator, as the service runs it: as
# the `receiver` user, with the service's configuration, secrets and working directory.
#
#   install -m 0755 contrib/receiver.sh /usr/local/bin/receiver
#   (the single executable: `receiver contrib install` writes this file naming itself)
#   receiver events list --source stripe --limit 20
#   receiver replay 1234
#
# Why the user matters: SQLite creates its -wal and -shm files as whoever opens the
# database first; a `replay` typed as root could leave files the service cannot open.
set -eu
RECEIVER_USER="${RECEIVER_USER:-receiver}"
RECEIVER_APP="${RECEIVER_APP:-/opt/receiver}"
# Exported: check-config and serve warn when others can read it.
export RECEIVER_ENV_FILE="${RECEIVER_ENV_FILE:-/etc/receiver/env}"
RECEIVER_HOME="${RECEIVER_HOME:-/var/lib/receiver}"
export RECEIVER_CONFIG="${RECEIVER_CONFIG:-/etc/receiver/receiver.config.json}"

if [ "$(id -un)" != "$RECEIVER_USER" ]; then
  export RECEIVER_USER RECEIVER_APP RECEIVER_ENV_FILE RECEIVER_HOME
  keep="RECEIVER_USER,RECEIVER_APP,RECEIVER_ENV_FILE,RECEIVER_HOME,RECEIVER_CONFIG"
  if [ "$(id -u)" = 0 ]; then exec runuser -u "$RECEIVER_USER" -w "$keep" -- "$0" "$@"; fi
  exec sudo -u "$RECEIVER_USER" --preserve-env="$keep" -- "$0" "$@"
fi

# The secrets the configuration names as env:NAME (NAME=value lines, as systemd reads them).
set -a
. "$RECEIVER_ENV_FILE"
set +a
cd "$RECEIVER_HOME"
exec node "$RECEIVER_APP/bin/receiver.js" "$@"
