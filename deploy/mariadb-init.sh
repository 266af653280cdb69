#!/usr/bin/env bash
# Runs in the mariadb-init one-shot container (docker-compose.yml, profile mariadb) after MariaDB is
# healthy, as root (MARIADB_HOST from the environment, the password in MYSQL_PWD, which the client reads).
# Creates the `bookstore` database in utf8mb4 with the binary collation if missing (the statement
# `npm run db:create` runs: keys compare byte for byte, as on PostgreSQL), creates the app's own user if
# missing, sets its password from .env (so changing APP_DB_PASSWORD and running `up` again rotates it),
# and gives it exactly what the service needs on `bookstore` and nothing else: rows (SELECT, INSERT,
# UPDATE, DELETE) and its migrations (CREATE, ALTER, INDEX, DROP). No global privilege, no GRANT OPTION.
set -euo pipefail

: "${MARIADB_HOST:?MARIADB_HOST missing}"
: "${APP_DB_USER:?APP_DB_USER missing}"
: "${APP_DB_PASSWORD:?APP_DB_PASSWORD missing}"

# Both are written into the SQL below between quotes: only characters that need no escaping. The
# password goes into the app's DATABASE_URL too: nothing that would need percent-encoding.
if [[ ! $APP_DB_USER =~ ^[A-Za-z0-9_]{1,32}$ ]]; then
  echo "mariadb-init: APP_DB_USER must be 1-32 letters, digits or '_'" >&2
  exit 1
fi
if [[ ! $APP_DB_PASSWORD =~ ^[A-Za-z0-9._~-]{16,128}$ ]]; then
  echo "mariadb-init: APP_DB_PASSWORD must be 16-128 letters, digits, '.', '_', '~' or '-'" >&2
  exit 1
fi

sql() { mariadb --protocol=tcp --host="$MARIADB_HOST" --user=root --batch --skip-column-names "$@"; }

# A database made earlier by other means keeps its collation: refuse to hand the service one whose keys
# would compare case- or accent-insensitively.
sql -e 'CREATE DATABASE IF NOT EXISTS `bookstore` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin'
collation=$(sql -e "SELECT DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'bookstore'")
if [[ $collation != utf8mb4_bin ]]; then
  echo "mariadb-init: database bookstore has the collation '$collation', not utf8mb4_bin" >&2
  exit 1
fi

sql <<SQL
CREATE USER IF NOT EXISTS '$APP_DB_USER'@'%';
ALTER USER '$APP_DB_USER'@'%' IDENTIFIED BY '$APP_DB_PASSWORD';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, DROP ON \`bookstore\`.* TO '$APP_DB_USER'@'%';
SQL
echo "mariadb-init: user $APP_DB_USER has rows and DDL on database bookstore (utf8mb4_bin) only"
