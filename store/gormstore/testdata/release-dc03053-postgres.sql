
SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

SET default_tablespace = '';

SET default_table_access_method = heap;

CREATE TABLE embedkit_account_quotas (
    account_id bigint NOT NULL,
    name text NOT NULL,
    n bigint NOT NULL,
    expires_at bigint NOT NULL
);

CREATE TABLE embedkit_account_user_slots (
    account_id bigint NOT NULL,
    shard integer NOT NULL,
    n bigint DEFAULT 0 NOT NULL
);

CREATE TABLE embedkit_accounts (
    id bigint NOT NULL,
    name text NOT NULL,
    plan text DEFAULT 'free'::text NOT NULL,
    use_creator_mode boolean DEFAULT false NOT NULL,
    max_external_users bigint DEFAULT 0 NOT NULL,
    branches text DEFAULT '[]'::text NOT NULL,
    limits text DEFAULT '{}'::text NOT NULL
);

CREATE SEQUENCE embedkit_accounts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE embedkit_accounts_id_seq OWNED BY embedkit_accounts.id;

CREATE TABLE embedkit_agents (
    account_id bigint NOT NULL,
    id text NOT NULL,
    deployment_id bigint NOT NULL
);

CREATE TABLE embedkit_api_keys (
    hash bytea NOT NULL,
    account_id bigint NOT NULL,
    admin boolean DEFAULT false NOT NULL,
    origin text DEFAULT 'config'::text NOT NULL,
    name text DEFAULT ''::text NOT NULL,
    created_at bigint DEFAULT 0 NOT NULL
);

CREATE TABLE embedkit_attribute_values (
    user_id bigint NOT NULL,
    attribute_id bigint NOT NULL,
    value text NOT NULL
);

CREATE TABLE embedkit_catalog_attributes (
    id bigint NOT NULL,
    account_id bigint NOT NULL,
    embed_tenant_id bigint DEFAULT 0 NOT NULL,
    name text NOT NULL,
    type text NOT NULL,
    display_name text,
    default_value text,
    description text,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
);

CREATE SEQUENCE embedkit_catalog_attributes_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE embedkit_catalog_attributes_id_seq OWNED BY embedkit_catalog_attributes.id;

CREATE TABLE embedkit_catalog_groups (
    id bigint NOT NULL,
    account_id bigint NOT NULL,
    embed_tenant_id bigint DEFAULT 0 NOT NULL,
    name text NOT NULL,
    description text,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
);

CREATE SEQUENCE embedkit_catalog_groups_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE embedkit_catalog_groups_id_seq OWNED BY embedkit_catalog_groups.id;

CREATE TABLE embedkit_deployments (
    account_id bigint NOT NULL,
    id bigint NOT NULL,
    name text DEFAULT ''::text NOT NULL
);

CREATE TABLE embedkit_embed_tenants (
    id bigint NOT NULL,
    account_id bigint NOT NULL,
    name text NOT NULL,
    created_at bigint NOT NULL
);

CREATE SEQUENCE embedkit_embed_tenants_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE embedkit_embed_tenants_id_seq OWNED BY embedkit_embed_tenants.id;

CREATE TABLE embedkit_group_members (
    user_id bigint NOT NULL,
    group_id bigint NOT NULL
);

CREATE TABLE embedkit_schema_versions (
    version bigint NOT NULL,
    applied_at bigint NOT NULL
);

CREATE TABLE embedkit_sessions (
    hash bytea NOT NULL,
    account_id bigint NOT NULL,
    user_id bigint NOT NULL,
    deployment_id bigint NOT NULL,
    embed_tenant_id bigint DEFAULT 0 NOT NULL,
    embed_tenant_name text DEFAULT ''::text NOT NULL,
    creator_mode boolean DEFAULT false NOT NULL,
    created_at bigint NOT NULL,
    expires_at bigint NOT NULL,
    used_at bigint,
    key_hash bytea
);

CREATE TABLE embedkit_thread_messages (
    account_id bigint NOT NULL,
    chat_id text NOT NULL,
    id text NOT NULL,
    sort bigint NOT NULL,
    body text NOT NULL
);

CREATE TABLE embedkit_threads (
    account_id bigint NOT NULL,
    chat_id text NOT NULL,
    agent_id text NOT NULL,
    user_id bigint NOT NULL,
    last_sort bigint DEFAULT 0 NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
);

CREATE TABLE embedkit_tokens (
    hash bytea NOT NULL,
    account_id bigint NOT NULL,
    user_id bigint NOT NULL,
    deployment_id bigint NOT NULL,
    embed_tenant_id bigint DEFAULT 0 NOT NULL,
    embed_tenant_name text DEFAULT ''::text NOT NULL,
    creator_mode boolean DEFAULT false NOT NULL,
    created_at bigint NOT NULL,
    expires_at bigint NOT NULL,
    key_hash bytea
);

CREATE TABLE embedkit_users (
    id bigint NOT NULL,
    account_id bigint NOT NULL,
    external_id text,
    internal_id text,
    email text DEFAULT ''::text NOT NULL,
    display_name text DEFAULT ''::text NOT NULL,
    picture text DEFAULT ''::text NOT NULL,
    security_context text,
    ephemeral boolean DEFAULT false NOT NULL,
    expires_at bigint,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
);

CREATE SEQUENCE embedkit_users_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE embedkit_users_id_seq OWNED BY embedkit_users.id;

ALTER TABLE ONLY embedkit_accounts ALTER COLUMN id SET DEFAULT nextval('embedkit_accounts_id_seq'::regclass);

ALTER TABLE ONLY embedkit_catalog_attributes ALTER COLUMN id SET DEFAULT nextval('embedkit_catalog_attributes_id_seq'::regclass);

ALTER TABLE ONLY embedkit_catalog_groups ALTER COLUMN id SET DEFAULT nextval('embedkit_catalog_groups_id_seq'::regclass);

ALTER TABLE ONLY embedkit_embed_tenants ALTER COLUMN id SET DEFAULT nextval('embedkit_embed_tenants_id_seq'::regclass);

ALTER TABLE ONLY embedkit_users ALTER COLUMN id SET DEFAULT nextval('embedkit_users_id_seq'::regclass);

INSERT INTO embedkit_account_user_slots VALUES (1, 1, 0);
INSERT INTO embedkit_account_user_slots VALUES (1, 2, 0);
INSERT INTO embedkit_account_user_slots VALUES (1, 4, 0);
INSERT INTO embedkit_account_user_slots VALUES (1, 5, 0);
INSERT INTO embedkit_account_user_slots VALUES (1, 6, 0);
INSERT INTO embedkit_account_user_slots VALUES (1, 7, 0);
INSERT INTO embedkit_account_user_slots VALUES (1, 8, 0);
INSERT INTO embedkit_account_user_slots VALUES (1, 9, 0);
INSERT INTO embedkit_account_user_slots VALUES (1, 10, 0);
INSERT INTO embedkit_account_user_slots VALUES (1, 12, 0);
INSERT INTO embedkit_account_user_slots VALUES (1, 13, 0);
INSERT INTO embedkit_account_user_slots VALUES (1, 14, 0);
INSERT INTO embedkit_account_user_slots VALUES (1, 15, 0);
INSERT INTO embedkit_account_user_slots VALUES (1, 11, 1);
INSERT INTO embedkit_account_user_slots VALUES (1, 0, 1);
INSERT INTO embedkit_account_user_slots VALUES (1, 3, 1);

INSERT INTO embedkit_accounts VALUES (1, 'acme', 'enterprise', false, 0, '[]', '{}');

INSERT INTO embedkit_attribute_values VALUES (1, 1, '"DE"');
INSERT INTO embedkit_attribute_values VALUES (1, 2, '3.50');
INSERT INTO embedkit_attribute_values VALUES (1, 3, '["a","b"]');
INSERT INTO embedkit_attribute_values VALUES (1, 4, '"role-0"');
INSERT INTO embedkit_attribute_values VALUES (2, 1, '"DE"');
INSERT INTO embedkit_attribute_values VALUES (2, 2, '3.50');
INSERT INTO embedkit_attribute_values VALUES (2, 3, '["a","b"]');
INSERT INTO embedkit_attribute_values VALUES (2, 4, '"role-1"');
INSERT INTO embedkit_attribute_values VALUES (3, 1, '"DE"');
INSERT INTO embedkit_attribute_values VALUES (3, 2, '3.50');
INSERT INTO embedkit_attribute_values VALUES (3, 3, '["a","b"]');
INSERT INTO embedkit_attribute_values VALUES (3, 4, '"role-2"');
INSERT INTO embedkit_attribute_values VALUES (4, 1, '"DE"');
INSERT INTO embedkit_attribute_values VALUES (4, 2, '3.50');
INSERT INTO embedkit_attribute_values VALUES (4, 3, '["a","b"]');
INSERT INTO embedkit_attribute_values VALUES (4, 4, '"role-3"');

INSERT INTO embedkit_catalog_attributes VALUES (1, 1, 0, 'country', 'string', NULL, NULL, NULL, 1795725568771022443, 1795725568771022443);
INSERT INTO embedkit_catalog_attributes VALUES (2, 1, 0, 'level', 'number', NULL, NULL, NULL, 1795725568771022443, 1795725568771022443);
INSERT INTO embedkit_catalog_attributes VALUES (3, 1, 0, 'tags', 'string_array', NULL, NULL, NULL, 1795725568771022443, 1795725568771022443);
INSERT INTO embedkit_catalog_attributes VALUES (4, 1, 1, 't1-role', 'string', NULL, NULL, NULL, 1795725568785428938, 1795725568785428938);

INSERT INTO embedkit_catalog_groups VALUES (1, 1, 0, 'sales', NULL, 1795725568769030286, 1795725568769030286);
INSERT INTO embedkit_catalog_groups VALUES (2, 1, 0, 'ops', NULL, 1795725568769030286, 1795725568769030286);
INSERT INTO embedkit_catalog_groups VALUES (4, 1, 1, 't1-team', NULL, 1795725568783616453, 1795725568783616453);

INSERT INTO embedkit_embed_tenants VALUES (1, 1, 't1', 1795725568775083660);

INSERT INTO embedkit_group_members VALUES (1, 1);
INSERT INTO embedkit_group_members VALUES (1, 2);
INSERT INTO embedkit_group_members VALUES (1, 4);
INSERT INTO embedkit_group_members VALUES (2, 1);
INSERT INTO embedkit_group_members VALUES (2, 2);
INSERT INTO embedkit_group_members VALUES (2, 4);
INSERT INTO embedkit_group_members VALUES (3, 1);
INSERT INTO embedkit_group_members VALUES (3, 2);
INSERT INTO embedkit_group_members VALUES (3, 4);
INSERT INTO embedkit_group_members VALUES (4, 1);
INSERT INTO embedkit_group_members VALUES (4, 2);
INSERT INTO embedkit_group_members VALUES (4, 4);

INSERT INTO embedkit_schema_versions VALUES (1, 1795725568743783899);
INSERT INTO embedkit_schema_versions VALUES (2, 1795725568755874625);
INSERT INTO embedkit_schema_versions VALUES (3, 1795725568759255887);
INSERT INTO embedkit_schema_versions VALUES (4, 1795725568759398267);
INSERT INTO embedkit_schema_versions VALUES (5, 1795725568761803545);

INSERT INTO embedkit_users VALUES (1, 1, 'user-0', NULL, '', '', '', NULL, false, NULL, 1795176000000000000, 1795176000000000000);
INSERT INTO embedkit_users VALUES (2, 1, 'user-1', NULL, '', '', '', NULL, false, NULL, 1795176000000000000, 1795176000000000000);
INSERT INTO embedkit_users VALUES (3, 1, 'user-2', NULL, '', '', '', NULL, false, NULL, 1795176000000000000, 1795176000000000000);
INSERT INTO embedkit_users VALUES (4, 1, 'user-3', NULL, '', '', '', NULL, true, 1826712000000000000, 1795176000000000000, 1795176000000000000);

SELECT pg_catalog.setval('embedkit_accounts_id_seq', 1, true);

SELECT pg_catalog.setval('embedkit_catalog_attributes_id_seq', 4, true);

SELECT pg_catalog.setval('embedkit_catalog_groups_id_seq', 4, true);

SELECT pg_catalog.setval('embedkit_embed_tenants_id_seq', 1, true);

SELECT pg_catalog.setval('embedkit_users_id_seq', 4, true);

ALTER TABLE ONLY embedkit_account_quotas
    ADD CONSTRAINT embedkit_account_quotas_pkey PRIMARY KEY (account_id, name);

ALTER TABLE ONLY embedkit_account_user_slots
    ADD CONSTRAINT embedkit_account_user_slots_pkey PRIMARY KEY (account_id, shard);

ALTER TABLE ONLY embedkit_accounts
    ADD CONSTRAINT embedkit_accounts_pkey PRIMARY KEY (id);

ALTER TABLE ONLY embedkit_agents
    ADD CONSTRAINT embedkit_agents_pkey PRIMARY KEY (account_id, id);

ALTER TABLE ONLY embedkit_api_keys
    ADD CONSTRAINT embedkit_api_keys_pkey PRIMARY KEY (hash);

ALTER TABLE ONLY embedkit_attribute_values
    ADD CONSTRAINT embedkit_attribute_values_pkey PRIMARY KEY (user_id, attribute_id);

ALTER TABLE ONLY embedkit_catalog_attributes
    ADD CONSTRAINT embedkit_catalog_attributes_pkey PRIMARY KEY (id);

ALTER TABLE ONLY embedkit_catalog_groups
    ADD CONSTRAINT embedkit_catalog_groups_pkey PRIMARY KEY (id);

ALTER TABLE ONLY embedkit_deployments
    ADD CONSTRAINT embedkit_deployments_pkey PRIMARY KEY (account_id, id);

ALTER TABLE ONLY embedkit_embed_tenants
    ADD CONSTRAINT embedkit_embed_tenants_pkey PRIMARY KEY (id);

ALTER TABLE ONLY embedkit_group_members
    ADD CONSTRAINT embedkit_group_members_pkey PRIMARY KEY (user_id, group_id);

ALTER TABLE ONLY embedkit_schema_versions
    ADD CONSTRAINT embedkit_schema_versions_pkey PRIMARY KEY (version);

ALTER TABLE ONLY embedkit_sessions
    ADD CONSTRAINT embedkit_sessions_pkey PRIMARY KEY (hash);

ALTER TABLE ONLY embedkit_thread_messages
    ADD CONSTRAINT embedkit_thread_messages_pkey PRIMARY KEY (account_id, chat_id, id);

ALTER TABLE ONLY embedkit_threads
    ADD CONSTRAINT embedkit_threads_pkey PRIMARY KEY (account_id, chat_id);

ALTER TABLE ONLY embedkit_tokens
    ADD CONSTRAINT embedkit_tokens_pkey PRIMARY KEY (hash);

ALTER TABLE ONLY embedkit_users
    ADD CONSTRAINT embedkit_users_pkey PRIMARY KEY (id);

CREATE INDEX embedkit_account_quotas_expiry ON embedkit_account_quotas USING btree (expires_at);

CREATE UNIQUE INDEX embedkit_accounts_name ON embedkit_accounts USING btree (name);

CREATE INDEX embedkit_api_keys_account ON embedkit_api_keys USING btree (account_id);

CREATE INDEX embedkit_attribute_values_attribute ON embedkit_attribute_values USING btree (attribute_id);

CREATE INDEX embedkit_catalog_attributes_keyset ON embedkit_catalog_attributes USING btree (account_id, embed_tenant_id, id);

CREATE UNIQUE INDEX embedkit_catalog_attributes_name ON embedkit_catalog_attributes USING btree (account_id, embed_tenant_id, name);

CREATE INDEX embedkit_catalog_groups_keyset ON embedkit_catalog_groups USING btree (account_id, embed_tenant_id, id);

CREATE UNIQUE INDEX embedkit_catalog_groups_name ON embedkit_catalog_groups USING btree (account_id, embed_tenant_id, name);

CREATE UNIQUE INDEX embedkit_embed_tenants_name ON embedkit_embed_tenants USING btree (account_id, name);

CREATE INDEX embedkit_group_members_group ON embedkit_group_members USING btree (group_id);

CREATE INDEX embedkit_sessions_expiry ON embedkit_sessions USING btree (expires_at);

CREATE INDEX embedkit_sessions_key ON embedkit_sessions USING btree (key_hash);

CREATE INDEX embedkit_sessions_user ON embedkit_sessions USING btree (user_id);

CREATE INDEX embedkit_thread_messages_sort ON embedkit_thread_messages USING btree (account_id, chat_id, sort);

CREATE INDEX embedkit_threads_user ON embedkit_threads USING btree (user_id);

CREATE INDEX embedkit_tokens_expiry ON embedkit_tokens USING btree (expires_at);

CREATE INDEX embedkit_tokens_key ON embedkit_tokens USING btree (key_hash);

CREATE INDEX embedkit_tokens_user ON embedkit_tokens USING btree (user_id);

CREATE UNIQUE INDEX embedkit_users_account_external ON embedkit_users USING btree (account_id, external_id);

CREATE UNIQUE INDEX embedkit_users_account_internal ON embedkit_users USING btree (account_id, internal_id);

CREATE INDEX embedkit_users_expiry ON embedkit_users USING btree (expires_at) WHERE ephemeral;

ALTER TABLE ONLY embedkit_account_quotas
    ADD CONSTRAINT fk_embedkit_account_quotas_account FOREIGN KEY (account_id) REFERENCES embedkit_accounts(id) ON DELETE CASCADE;

ALTER TABLE ONLY embedkit_account_user_slots
    ADD CONSTRAINT fk_embedkit_account_user_slots_account FOREIGN KEY (account_id) REFERENCES embedkit_accounts(id) ON DELETE CASCADE;

ALTER TABLE ONLY embedkit_agents
    ADD CONSTRAINT fk_embedkit_agents_account FOREIGN KEY (account_id) REFERENCES embedkit_accounts(id) ON DELETE CASCADE;

ALTER TABLE ONLY embedkit_api_keys
    ADD CONSTRAINT fk_embedkit_api_keys_account FOREIGN KEY (account_id) REFERENCES embedkit_accounts(id) ON DELETE CASCADE;

ALTER TABLE ONLY embedkit_attribute_values
    ADD CONSTRAINT fk_embedkit_attribute_values_attribute FOREIGN KEY (attribute_id) REFERENCES embedkit_catalog_attributes(id) ON DELETE CASCADE;

ALTER TABLE ONLY embedkit_attribute_values
    ADD CONSTRAINT fk_embedkit_attribute_values_user FOREIGN KEY (user_id) REFERENCES embedkit_users(id) ON DELETE CASCADE;

ALTER TABLE ONLY embedkit_catalog_attributes
    ADD CONSTRAINT fk_embedkit_catalog_attributes_account FOREIGN KEY (account_id) REFERENCES embedkit_accounts(id) ON DELETE CASCADE;

ALTER TABLE ONLY embedkit_catalog_groups
    ADD CONSTRAINT fk_embedkit_catalog_groups_account FOREIGN KEY (account_id) REFERENCES embedkit_accounts(id) ON DELETE CASCADE;

ALTER TABLE ONLY embedkit_deployments
    ADD CONSTRAINT fk_embedkit_deployments_account FOREIGN KEY (account_id) REFERENCES embedkit_accounts(id) ON DELETE CASCADE;

ALTER TABLE ONLY embedkit_embed_tenants
    ADD CONSTRAINT fk_embedkit_embed_tenants_account FOREIGN KEY (account_id) REFERENCES embedkit_accounts(id) ON DELETE CASCADE;

ALTER TABLE ONLY embedkit_group_members
    ADD CONSTRAINT fk_embedkit_group_members_group FOREIGN KEY (group_id) REFERENCES embedkit_catalog_groups(id) ON DELETE CASCADE;

ALTER TABLE ONLY embedkit_group_members
    ADD CONSTRAINT fk_embedkit_group_members_user FOREIGN KEY (user_id) REFERENCES embedkit_users(id) ON DELETE CASCADE;

ALTER TABLE ONLY embedkit_sessions
    ADD CONSTRAINT fk_embedkit_sessions_api_key FOREIGN KEY (key_hash) REFERENCES embedkit_api_keys(hash) ON DELETE CASCADE;

ALTER TABLE ONLY embedkit_sessions
    ADD CONSTRAINT fk_embedkit_sessions_user FOREIGN KEY (user_id) REFERENCES embedkit_users(id) ON DELETE CASCADE;

ALTER TABLE ONLY embedkit_thread_messages
    ADD CONSTRAINT fk_embedkit_threads_messages FOREIGN KEY (account_id, chat_id) REFERENCES embedkit_threads(account_id, chat_id) ON DELETE CASCADE;

ALTER TABLE ONLY embedkit_threads
    ADD CONSTRAINT fk_embedkit_threads_user FOREIGN KEY (user_id) REFERENCES embedkit_users(id) ON DELETE CASCADE;

ALTER TABLE ONLY embedkit_tokens
    ADD CONSTRAINT fk_embedkit_tokens_api_key FOREIGN KEY (key_hash) REFERENCES embedkit_api_keys(hash) ON DELETE CASCADE;

ALTER TABLE ONLY embedkit_tokens
    ADD CONSTRAINT fk_embedkit_tokens_user FOREIGN KEY (user_id) REFERENCES embedkit_users(id) ON DELETE CASCADE;

ALTER TABLE ONLY embedkit_users
    ADD CONSTRAINT fk_embedkit_users_account FOREIGN KEY (account_id) REFERENCES embedkit_accounts(id) ON DELETE CASCADE;

