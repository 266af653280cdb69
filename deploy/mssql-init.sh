#!/usr/bin/env bash
# Runs in the mssql-init one-shot container (docker-compose.yml) after SQL Server is healthy:
# applies mssql-init.sql as sa. Every step there checks first, so running it on each
# `docker compose up` is safe, and it is how a changed APP_DB_PASSWORD reaches SQL Server.
set -euo pipefail

: "${SQLCMDPASSWORD:?sa password missing}"
: "${APP_DB_USER:?APP_DB_USER missing}"
: "${APP_DB_PASSWORD:?APP_DB_PASSWORD missing}"

# Both go into SQL text and the app's DATABASE_URL: refuse anything that would need quoting.
if [[ ! $APP_DB_USER =~ ^[A-Za-z][A-Za-z0-9_]{0,63}$ ]]; then
  echo "mssql-init: APP_DB_USER must be a letter then letters, digits or _ (64 at most)" >&2
  exit 1
fi
if [[ ! $APP_DB_PASSWORD =~ ^[A-Za-z0-9._~-]{16,128}$ ]]; then
  echo "mssql-init: APP_DB_PASSWORD must be 16-128 letters, digits, '.', '_', '~' or '-'" >&2
  exit 1
fi

# -C trusts the server's self-signed certificate; -l bounds the login, -b fails on the first error.
exec /opt/mssql-tools18/bin/sqlcmd -C -S mssql -U sa -l 15 -b \
  -v DATABASE=bookstore APP_LOGIN="$APP_DB_USER" APP_PASSWORD="$APP_DB_PASSWORD" \
  -i /docker-init/mssql-init.sql
