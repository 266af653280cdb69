-- Applied as sa by deploy/mssql-init.sh on every `docker compose up`; every step checks first.
-- sqlcmd variables: DATABASE, APP_LOGIN, APP_PASSWORD (checked by the script: no quoting needed).
:on error exit
SET NOCOUNT ON;
GO

IF DB_ID(N'$(DATABASE)') IS NULL
  CREATE DATABASE [$(DATABASE)];
GO

-- Readers see the last committed row version instead of waiting on writers' locks, as on
-- PostgreSQL. Switching needs a moment alone in the database: only ever done once, at creation.
IF EXISTS (SELECT 1 FROM sys.databases WHERE name = N'$(DATABASE)' AND is_read_committed_snapshot_on = 0)
  ALTER DATABASE [$(DATABASE)] SET READ_COMMITTED_SNAPSHOT ON WITH ROLLBACK IMMEDIATE;
GO

-- The app's own login. The password in .env wins: set on creation, reset on every run (rotation).
IF SUSER_ID(N'$(APP_LOGIN)') IS NULL
  CREATE LOGIN [$(APP_LOGIN)] WITH PASSWORD = N'$(APP_PASSWORD)', DEFAULT_DATABASE = [$(DATABASE)],
    CHECK_POLICY = ON, CHECK_EXPIRATION = OFF;
ELSE
  ALTER LOGIN [$(APP_LOGIN)] WITH PASSWORD = N'$(APP_PASSWORD)';
GO

USE [$(DATABASE)];
GO

-- Its user in this database only: read, write, and DDL for the service's migrations.
-- No db_owner, no server role: it cannot create databases, change security, or read other databases.
IF DATABASE_PRINCIPAL_ID(N'$(APP_LOGIN)') IS NULL
  CREATE USER [$(APP_LOGIN)] FOR LOGIN [$(APP_LOGIN)];
ELSE
  -- Re-attaches the user if the login was dropped and created again (a new SID).
  ALTER USER [$(APP_LOGIN)] WITH LOGIN = [$(APP_LOGIN)];
GO

ALTER ROLE db_datareader ADD MEMBER [$(APP_LOGIN)];
ALTER ROLE db_datawriter ADD MEMBER [$(APP_LOGIN)];
ALTER ROLE db_ddladmin ADD MEMBER [$(APP_LOGIN)];
GO

PRINT N'mssql-init: database $(DATABASE) and login $(APP_LOGIN) are ready';
GO
