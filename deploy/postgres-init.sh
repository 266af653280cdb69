#!/usr/bin/env bash
# Runs in the postgres-init one-shot container (docker-compose.yml, profile postgres) after
# PostgreSQL is healthy, as the superuser (PGHOST, PGUSER, PGPASSWORD from the environment).
# Creates the app's own role if missing, sets its password from .env (so changing
# APP_DB_PASSWORD and running `up` again rotates it), and makes it the owner of `bookstore`:
# it can create its tables there, and it is not a superuser and owns nothing else.
set -euo pipefail

: "${APP_DB_USER:?APP_DB_USER missing}"
: "${APP_DB_PASSWORD:?APP_DB_PASSWORD missing}"

# The password goes into the app's DATABASE_URL: refuse anything that would need percent-encoding.
if [[ ! $APP_DB_PASSWORD =~ ^[A-Za-z0-9._~-]{16,128}$ ]]; then
  echo "postgres-init: APP_DB_PASSWORD must be 16-128 letters, digits, '.', '_', '~' or '-'" >&2
  exit 1
fi

# psql's :"name" and :'value' quote the variables; \gexec runs the CREATE only when it is missing.
psql -v ON_ERROR_STOP=1 --no-psqlrc --dbname postgres \
  --set=app_user="$APP_DB_USER" --set=app_password="$APP_DB_PASSWORD" <<'SQL'
SELECT format('CREATE ROLE %I LOGIN', :'app_user')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'app_user') \gexec
ALTER ROLE :"app_user" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'app_password';
ALTER DATABASE bookstore OWNER TO :"app_user";
SQL
echo "postgres-init: role $APP_DB_USER owns database bookstore"
