#!/bin/sh
# /usr/local/bin/receiver: receiver's CLI for the operator, as the service runs it: with
# the service's configuration, secrets and working directory, as the service's user.
#
#   install -m 0755 contrib/receiver.sh /usr/local/bin/receiver
#   (the single executable: `receiver contrib install` writes this file naming itself)
#   receiver events list --source stripe --limit 20
#   receiver replay 1234
#
# Run as root (or through sudo), it reads the env file, which is root's alone; receiver
# reads the configuration and secrets, then becomes $RECEIVER_USER, as serve does, so the
# service's effects cannot read them from this process either. Why the user matters too:
# SQLite creates its -wal and -shm files as whoever opens the database first; a `replay`
# left as root could leave files the service cannot open.
set -eu
export RECEIVER_USER="${RECEIVER_USER:-receiver}"
RECEIVER_APP="${RECEIVER_APP:-/opt/receiver}"
# Exported: check-config and serve warn when others can read it.
export RECEIVER_ENV_FILE="${RECEIVER_ENV_FILE:-/etc/receiver/env}"
RECEIVER_HOME="${RECEIVER_HOME:-/var/lib/receiver}"
export RECEIVER_CONFIG="${RECEIVER_CONFIG:-/etc/receiver/receiver.config.json}"

if [ "$(id -u)" != 0 ] && [ "$(id -un)" != "$RECEIVER_USER" ]; then
  export RECEIVER_APP RECEIVER_HOME
  exec sudo --preserve-env="RECEIVER_USER,RECEIVER_APP,RECEIVER_ENV_FILE,RECEIVER_HOME,RECEIVER_CONFIG" -- "$0" "$@"
fi

# The secrets the configuration names as env:NAME (NAME=value lines, as systemd reads them).
# As the service's user (cron's lines) the file is not readable: the commands that verify
# nothing (purge, backup, events, stats, replay) do not need it.
if [ "$(id -u)" = 0 ] || [ -r "$RECEIVER_ENV_FILE" ]; then
  set -a
  . "$RECEIVER_ENV_FILE"
  set +a
fi
cd "$RECEIVER_HOME"
exec node "$RECEIVER_APP/bin/receiver.js" "$@"
