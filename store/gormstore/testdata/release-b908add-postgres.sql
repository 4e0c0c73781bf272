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
CREATE TABLE account_quotas (
    account_id bigint NOT NULL,
    name text NOT NULL,
    n bigint NOT NULL,
    expires_at bigint NOT NULL
);
CREATE TABLE account_user_slots (
    account_id bigint NOT NULL,
    shard integer NOT NULL,
    n bigint DEFAULT 0 NOT NULL
);
CREATE TABLE accounts (
    id bigint NOT NULL,
    name text NOT NULL,
    plan text DEFAULT 'free'::text NOT NULL,
    use_creator_mode boolean DEFAULT false NOT NULL,
    max_external_users bigint DEFAULT 0 NOT NULL,
    branches text DEFAULT '[]'::text NOT NULL,
    limits text DEFAULT '{}'::text NOT NULL
);
CREATE SEQUENCE accounts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE accounts_id_seq OWNED BY accounts.id;
CREATE TABLE agents (
    account_id bigint NOT NULL,
    id text NOT NULL,
    deployment_id bigint NOT NULL
);
CREATE TABLE api_keys (
    hash bytea NOT NULL,
    account_id bigint NOT NULL,
    admin boolean DEFAULT false NOT NULL,
    origin text DEFAULT 'config'::text NOT NULL,
    name text DEFAULT ''::text NOT NULL,
    created_at bigint DEFAULT 0 NOT NULL
);
CREATE TABLE attribute_values (
    user_id bigint NOT NULL,
    attribute_id bigint NOT NULL,
    value text NOT NULL
);
CREATE TABLE catalog_attributes (
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
CREATE SEQUENCE catalog_attributes_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE catalog_attributes_id_seq OWNED BY catalog_attributes.id;
CREATE TABLE catalog_groups (
    id bigint NOT NULL,
    account_id bigint NOT NULL,
    embed_tenant_id bigint DEFAULT 0 NOT NULL,
    name text NOT NULL,
    description text,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
);
CREATE SEQUENCE catalog_groups_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE catalog_groups_id_seq OWNED BY catalog_groups.id;
CREATE TABLE deployments (
    account_id bigint NOT NULL,
    id bigint NOT NULL,
    name text DEFAULT ''::text NOT NULL
);
CREATE TABLE embed_tenants (
    id bigint NOT NULL,
    account_id bigint NOT NULL,
    name text NOT NULL,
    created_at bigint NOT NULL
);
CREATE SEQUENCE embed_tenants_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE embed_tenants_id_seq OWNED BY embed_tenants.id;
CREATE TABLE embedkit_schema_versions (
    version bigint NOT NULL,
    applied_at bigint NOT NULL
);
CREATE TABLE group_members (
    user_id bigint NOT NULL,
    group_id bigint NOT NULL
);
CREATE TABLE sessions (
    hash bytea NOT NULL,
    account_id bigint NOT NULL,
    user_id bigint NOT NULL,
    deployment_id bigint NOT NULL,
    embed_tenant_id bigint DEFAULT 0 NOT NULL,
    embed_tenant_name text DEFAULT ''::text NOT NULL,
    creator_mode boolean DEFAULT false NOT NULL,
    created_at bigint NOT NULL,
    expires_at bigint NOT NULL,
    used_at bigint
);
CREATE TABLE thread_messages (
    account_id bigint NOT NULL,
    chat_id text NOT NULL,
    id text NOT NULL,
    sort bigint NOT NULL,
    body text NOT NULL
);
CREATE TABLE threads (
    account_id bigint NOT NULL,
    chat_id text NOT NULL,
    agent_id text NOT NULL,
    user_id bigint NOT NULL,
    last_sort bigint DEFAULT 0 NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
);
CREATE TABLE tokens (
    hash bytea NOT NULL,
    account_id bigint NOT NULL,
    user_id bigint NOT NULL,
    deployment_id bigint NOT NULL,
    embed_tenant_id bigint DEFAULT 0 NOT NULL,
    embed_tenant_name text DEFAULT ''::text NOT NULL,
    creator_mode boolean DEFAULT false NOT NULL,
    created_at bigint NOT NULL,
    expires_at bigint NOT NULL
);
CREATE TABLE users (
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
CREATE SEQUENCE users_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE users_id_seq OWNED BY users.id;
ALTER TABLE ONLY accounts ALTER COLUMN id SET DEFAULT nextval('accounts_id_seq'::regclass);
ALTER TABLE ONLY catalog_attributes ALTER COLUMN id SET DEFAULT nextval('catalog_attributes_id_seq'::regclass);
ALTER TABLE ONLY catalog_groups ALTER COLUMN id SET DEFAULT nextval('catalog_groups_id_seq'::regclass);
ALTER TABLE ONLY embed_tenants ALTER COLUMN id SET DEFAULT nextval('embed_tenants_id_seq'::regclass);
ALTER TABLE ONLY users ALTER COLUMN id SET DEFAULT nextval('users_id_seq'::regclass);
INSERT INTO account_quotas VALUES (1, 'ephemeral-minute', 1, 2082758400000000000);
INSERT INTO account_user_slots VALUES (1, 4, 0);
INSERT INTO account_user_slots VALUES (1, 5, 0);
INSERT INTO account_user_slots VALUES (1, 7, 0);
INSERT INTO account_user_slots VALUES (1, 8, 0);
INSERT INTO account_user_slots VALUES (1, 9, 0);
INSERT INTO account_user_slots VALUES (1, 10, 0);
INSERT INTO account_user_slots VALUES (1, 12, 0);
INSERT INTO account_user_slots VALUES (1, 1, 1);
INSERT INTO account_user_slots VALUES (1, 6, 1);
INSERT INTO account_user_slots VALUES (1, 0, 2);
INSERT INTO account_user_slots VALUES (1, 13, 1);
INSERT INTO account_user_slots VALUES (1, 2, 1);
INSERT INTO account_user_slots VALUES (1, 15, 1);
INSERT INTO account_user_slots VALUES (1, 3, 2);
INSERT INTO account_user_slots VALUES (1, 11, 1);
INSERT INTO account_user_slots VALUES (1, 14, 2);
INSERT INTO accounts VALUES (1, 'acme', 'premium', false, 0, '[]', '{}');
INSERT INTO agents VALUES (1, '7', 7);
INSERT INTO api_keys VALUES ('\xf566ef53fedf3677840030258c49381b6d494206f98a463fd43c91a5f8e1edbb', 1, true, 'config', '', 1795168800000000000);
INSERT INTO api_keys VALUES ('\x24878aae3d0d65f9b326e1de6994c1325cf0566a9a327fd02951db812153d62c', 1, false, 'api', 'ci', 1795168800000000000);
INSERT INTO attribute_values VALUES (1, 1, '"DE"');
INSERT INTO attribute_values VALUES (1, 2, '"EU"');
INSERT INTO attribute_values VALUES (1, 3, '3');
INSERT INTO attribute_values VALUES (2, 1, '"DE"');
INSERT INTO attribute_values VALUES (2, 2, '"EU"');
INSERT INTO attribute_values VALUES (2, 3, '3');
INSERT INTO attribute_values VALUES (3, 1, '"DE"');
INSERT INTO attribute_values VALUES (3, 2, '"EU"');
INSERT INTO attribute_values VALUES (3, 3, '3');
INSERT INTO attribute_values VALUES (4, 1, '"DE"');
INSERT INTO attribute_values VALUES (4, 2, '"EU"');
INSERT INTO attribute_values VALUES (4, 3, '3');
INSERT INTO attribute_values VALUES (5, 1, '"DE"');
INSERT INTO attribute_values VALUES (5, 2, '"EU"');
INSERT INTO attribute_values VALUES (5, 3, '3');
INSERT INTO attribute_values VALUES (6, 1, '"DE"');
INSERT INTO attribute_values VALUES (6, 2, '"EU"');
INSERT INTO attribute_values VALUES (6, 3, '3');
INSERT INTO attribute_values VALUES (7, 1, '"DE"');
INSERT INTO attribute_values VALUES (7, 2, '"EU"');
INSERT INTO attribute_values VALUES (7, 3, '3');
INSERT INTO attribute_values VALUES (8, 1, '"DE"');
INSERT INTO attribute_values VALUES (8, 2, '"EU"');
INSERT INTO attribute_values VALUES (8, 3, '3');
INSERT INTO attribute_values VALUES (9, 1, '"DE"');
INSERT INTO attribute_values VALUES (9, 2, '"EU"');
INSERT INTO attribute_values VALUES (9, 3, '3');
INSERT INTO attribute_values VALUES (10, 1, '"DE"');
INSERT INTO attribute_values VALUES (10, 2, '"EU"');
INSERT INTO attribute_values VALUES (10, 3, '3');
INSERT INTO attribute_values VALUES (11, 1, '"DE"');
INSERT INTO attribute_values VALUES (11, 2, '"EU"');
INSERT INTO attribute_values VALUES (11, 3, '3');
INSERT INTO attribute_values VALUES (12, 1, '"DE"');
INSERT INTO attribute_values VALUES (12, 2, '"EU"');
INSERT INTO attribute_values VALUES (12, 3, '3');
INSERT INTO catalog_attributes VALUES (1, 1, 0, 'country', 'string', NULL, NULL, NULL, 1795715945084045830, 1795715945084045830);
INSERT INTO catalog_attributes VALUES (2, 1, 0, 'region', 'string', NULL, NULL, NULL, 1795715945084045830, 1795715945084045830);
INSERT INTO catalog_attributes VALUES (3, 1, 0, 'level', 'number', NULL, NULL, NULL, 1795715945084045830, 1795715945084045830);
INSERT INTO catalog_groups VALUES (1, 1, 0, 'sales', NULL, 1795715945073709393, 1795715945073709393);
INSERT INTO catalog_groups VALUES (2, 1, 0, 'emea', NULL, 1795715945073709393, 1795715945073709393);
INSERT INTO catalog_groups VALUES (3, 1, 0, 'admins', NULL, 1795715945073709393, 1795715945073709393);
INSERT INTO catalog_groups VALUES (4, 1, 1, 'local', NULL, 1795715945101390058, 1795715945101390058);
INSERT INTO deployments VALUES (1, 7, 'sales');
INSERT INTO embed_tenants VALUES (1, 1, 'tenant-a', 1795715945096800064);
INSERT INTO embedkit_schema_versions VALUES (1, 1795715944969870743);
INSERT INTO embedkit_schema_versions VALUES (2, 1795715945017316990);
INSERT INTO embedkit_schema_versions VALUES (3, 1795715945030722463);
INSERT INTO group_members VALUES (1, 1);
INSERT INTO group_members VALUES (1, 2);
INSERT INTO group_members VALUES (2, 1);
INSERT INTO group_members VALUES (2, 2);
INSERT INTO group_members VALUES (3, 1);
INSERT INTO group_members VALUES (3, 2);
INSERT INTO group_members VALUES (4, 1);
INSERT INTO group_members VALUES (4, 2);
INSERT INTO group_members VALUES (5, 1);
INSERT INTO group_members VALUES (5, 2);
INSERT INTO group_members VALUES (6, 1);
INSERT INTO group_members VALUES (6, 2);
INSERT INTO group_members VALUES (7, 1);
INSERT INTO group_members VALUES (7, 2);
INSERT INTO group_members VALUES (8, 1);
INSERT INTO group_members VALUES (8, 2);
INSERT INTO group_members VALUES (9, 1);
INSERT INTO group_members VALUES (9, 2);
INSERT INTO group_members VALUES (10, 1);
INSERT INTO group_members VALUES (10, 2);
INSERT INTO group_members VALUES (11, 1);
INSERT INTO group_members VALUES (11, 2);
INSERT INTO group_members VALUES (12, 1);
INSERT INTO group_members VALUES (12, 2);
INSERT INTO sessions VALUES ('\x44920f337b457e50748d8bd8a151b87424d95e0001dd4756643532b48766799b', 1, 1, 7, 0, '', false, 1795168800000000000, 1795169100000000000, 1795168800000000000);
INSERT INTO sessions VALUES ('\x51141e81a6f2e4b3a3a7386a3e4957797a04a1bac53d9142c66d167e395bab79', 1, 2, 7, 0, '', false, 1795168800000000000, 1795169100000000000, 1795168800000000000);
INSERT INTO sessions VALUES ('\x1ce506fb6eea821d8eea982e708451dfd0881c1ddfa05b93e0b5fc30ffee6598', 1, 3, 7, 0, '', false, 1795168800000000000, 1795169100000000000, NULL);
INSERT INTO sessions VALUES ('\x40ad20ab25264ba263fb49ea26a7b3e201a14935261b1720d122dd105795366f', 1, 4, 7, 0, '', false, 1795168800000000000, 1795169100000000000, NULL);
INSERT INTO sessions VALUES ('\x98394d8203c1c8efdf312d06d818f02ab75b6879bc03f7a51a37848a75084053', 1, 5, 7, 0, '', false, 1795168800000000000, 1795169100000000000, NULL);
INSERT INTO sessions VALUES ('\x9cd695f477330a19ccca73fc2b21b9ed176be5c959300d64658ec1fbe4510607', 1, 6, 7, 0, '', false, 1795168800000000000, 1795169100000000000, NULL);
INSERT INTO sessions VALUES ('\x503c3aa34c01798f18d947997f6c6f0678068cb2b9f505700eff54ef8fb126d0', 1, 7, 7, 0, '', false, 1795168800000000000, 1795169100000000000, NULL);
INSERT INTO sessions VALUES ('\xb4fb329927cf01215e1cde2df430d3ac4b0d92ef89e67365ed051bd0f9f02e33', 1, 8, 7, 0, '', false, 1795168800000000000, 1795169100000000000, NULL);
INSERT INTO sessions VALUES ('\x9d429a172bbf8ee9874e80641eb9250f9972afeea5b699f508abbde4ad80007c', 1, 9, 7, 0, '', false, 1795168800000000000, 1795169100000000000, NULL);
INSERT INTO sessions VALUES ('\x7067b9cb8e89519d539cae53ce496340aa41f003bc4dc2eb8b3573c60a42014e', 1, 10, 7, 0, '', false, 1795168800000000000, 1795169100000000000, NULL);
INSERT INTO sessions VALUES ('\x375b9063ae69370f7441db6d4a2e14299785290a685f8069de68aeb650c6aa4f', 1, 11, 7, 0, '', false, 1795168800000000000, 1795169100000000000, NULL);
INSERT INTO sessions VALUES ('\x89ea3fa7d06bcd3fc6f206726385767742609c7b7bedccd13b548b3abafca76d', 1, 12, 7, 0, '', false, 1795168800000000000, 1795169100000000000, NULL);
INSERT INTO thread_messages VALUES (1, 'chat-alice', 'm1', 1, '{"role":"user","text":"hi"}');
INSERT INTO thread_messages VALUES (1, 'chat-alice', 'm2', 2, '{"role":"agent","text":"hello"}');
INSERT INTO thread_messages VALUES (1, 'chat-bob', 'm1', 1, '{"role":"user","text":"hi"}');
INSERT INTO thread_messages VALUES (1, 'chat-bob', 'm2', 2, '{"role":"agent","text":"hello"}');
INSERT INTO thread_messages VALUES (1, 'chat-user-02', 'm1', 1, '{"role":"user","text":"hi"}');
INSERT INTO thread_messages VALUES (1, 'chat-user-02', 'm2', 2, '{"role":"agent","text":"hello"}');
INSERT INTO threads VALUES (1, 'chat-alice', '7', 1, 2, 1795168800000000000, 1795715945146789056);
INSERT INTO threads VALUES (1, 'chat-bob', '7', 2, 2, 1795168800000000000, 1795715945160105470);
INSERT INTO threads VALUES (1, 'chat-user-02', '7', 3, 2, 1795168800000000000, 1795715945168066128);
INSERT INTO tokens VALUES ('\x52def2f5d81e26b17a79a4aae92463d108a053fcf1f77da7a7571767bb2f009f', 1, 1, 7, 0, '', false, 1795168800000000000, 2082758400000000000);
INSERT INTO tokens VALUES ('\x71353448e0deea68f95c17ec0c10d68e874fd2941f4a49d0b573074df81f826f', 1, 2, 7, 0, '', false, 1795168800000000000, 2082758400000000000);
INSERT INTO users VALUES (1, 1, 'alice', NULL, '', 'alice', '', NULL, false, NULL, 1795168800000000000, 1795168800000000000);
INSERT INTO users VALUES (2, 1, 'bob', NULL, '', 'bob', '', NULL, false, NULL, 1795168800000000000, 1795168800000000000);
INSERT INTO users VALUES (3, 1, 'user-02', NULL, '', 'user-02', '', NULL, false, NULL, 1795168800000000000, 1795168800000000000);
INSERT INTO users VALUES (4, 1, 'user-03', NULL, '', 'user-03', '', NULL, false, NULL, 1795168800000000000, 1795168800000000000);
INSERT INTO users VALUES (5, 1, 'user-04', NULL, '', 'user-04', '', NULL, false, NULL, 1795168800000000000, 1795168800000000000);
INSERT INTO users VALUES (6, 1, 'user-05', NULL, '', 'user-05', '', NULL, false, NULL, 1795168800000000000, 1795168800000000000);
INSERT INTO users VALUES (7, 1, 'user-06', NULL, '', 'user-06', '', NULL, false, NULL, 1795168800000000000, 1795168800000000000);
INSERT INTO users VALUES (8, 1, 'user-07', NULL, '', 'user-07', '', NULL, false, NULL, 1795168800000000000, 1795168800000000000);
INSERT INTO users VALUES (9, 1, 'user-08', NULL, '', 'user-08', '', NULL, false, NULL, 1795168800000000000, 1795168800000000000);
INSERT INTO users VALUES (10, 1, 'user-09', NULL, '', 'user-09', '', NULL, false, NULL, 1795168800000000000, 1795168800000000000);
INSERT INTO users VALUES (11, 1, 'user-10', NULL, '', 'user-10', '', NULL, false, NULL, 1795168800000000000, 1795168800000000000);
INSERT INTO users VALUES (12, 1, 'user-11', NULL, '', 'user-11', '', NULL, false, NULL, 1795168800000000000, 1795168800000000000);
INSERT INTO users VALUES (13, 1, 'visitor', NULL, '', '', '', NULL, true, 1795172400000000000, 1795168800000000000, 1795168800000000000);
SELECT pg_catalog.setval('accounts_id_seq', 1, true);
SELECT pg_catalog.setval('catalog_attributes_id_seq', 3, true);
SELECT pg_catalog.setval('catalog_groups_id_seq', 4, true);
SELECT pg_catalog.setval('embed_tenants_id_seq', 1, true);
SELECT pg_catalog.setval('users_id_seq', 13, true);
ALTER TABLE ONLY account_quotas
    ADD CONSTRAINT account_quotas_pkey PRIMARY KEY (account_id, name);
ALTER TABLE ONLY account_user_slots
    ADD CONSTRAINT account_user_slots_pkey PRIMARY KEY (account_id, shard);
ALTER TABLE ONLY accounts
    ADD CONSTRAINT accounts_pkey PRIMARY KEY (id);
ALTER TABLE ONLY agents
    ADD CONSTRAINT agents_pkey PRIMARY KEY (account_id, id);
ALTER TABLE ONLY api_keys
    ADD CONSTRAINT api_keys_pkey PRIMARY KEY (hash);
ALTER TABLE ONLY attribute_values
    ADD CONSTRAINT attribute_values_pkey PRIMARY KEY (user_id, attribute_id);
ALTER TABLE ONLY catalog_attributes
    ADD CONSTRAINT catalog_attributes_pkey PRIMARY KEY (id);
ALTER TABLE ONLY catalog_groups
    ADD CONSTRAINT catalog_groups_pkey PRIMARY KEY (id);
ALTER TABLE ONLY deployments
    ADD CONSTRAINT deployments_pkey PRIMARY KEY (account_id, id);
ALTER TABLE ONLY embed_tenants
    ADD CONSTRAINT embed_tenants_pkey PRIMARY KEY (id);
ALTER TABLE ONLY embedkit_schema_versions
    ADD CONSTRAINT embedkit_schema_versions_pkey PRIMARY KEY (version);
ALTER TABLE ONLY group_members
    ADD CONSTRAINT group_members_pkey PRIMARY KEY (user_id, group_id);
ALTER TABLE ONLY sessions
    ADD CONSTRAINT sessions_pkey PRIMARY KEY (hash);
ALTER TABLE ONLY thread_messages
    ADD CONSTRAINT thread_messages_pkey PRIMARY KEY (account_id, chat_id, id);
ALTER TABLE ONLY threads
    ADD CONSTRAINT threads_pkey PRIMARY KEY (account_id, chat_id);
ALTER TABLE ONLY tokens
    ADD CONSTRAINT tokens_pkey PRIMARY KEY (hash);
ALTER TABLE ONLY users
    ADD CONSTRAINT users_pkey PRIMARY KEY (id);
CREATE INDEX account_quotas_expiry ON account_quotas USING btree (expires_at);
CREATE UNIQUE INDEX accounts_name ON accounts USING btree (name);
CREATE INDEX api_keys_account ON api_keys USING btree (account_id);
CREATE INDEX attribute_values_attribute ON attribute_values USING btree (attribute_id);
CREATE INDEX catalog_attributes_keyset ON catalog_attributes USING btree (account_id, embed_tenant_id, id);
CREATE UNIQUE INDEX catalog_attributes_name ON catalog_attributes USING btree (account_id, embed_tenant_id, name);
CREATE INDEX catalog_groups_keyset ON catalog_groups USING btree (account_id, embed_tenant_id, id);
CREATE UNIQUE INDEX catalog_groups_name ON catalog_groups USING btree (account_id, embed_tenant_id, name);
CREATE UNIQUE INDEX embed_tenants_name ON embed_tenants USING btree (account_id, name);
CREATE INDEX group_members_group ON group_members USING btree (group_id);
CREATE INDEX sessions_expiry ON sessions USING btree (expires_at);
CREATE INDEX sessions_user ON sessions USING btree (user_id);
CREATE INDEX thread_messages_sort ON thread_messages USING btree (account_id, chat_id, sort);
CREATE INDEX threads_user ON threads USING btree (user_id);
CREATE INDEX tokens_expiry ON tokens USING btree (expires_at);
CREATE INDEX tokens_user ON tokens USING btree (user_id);
CREATE UNIQUE INDEX users_account_external ON users USING btree (account_id, external_id);
CREATE UNIQUE INDEX users_account_internal ON users USING btree (account_id, internal_id);
CREATE INDEX users_expiry ON users USING btree (expires_at) WHERE ephemeral;
ALTER TABLE ONLY account_quotas
    ADD CONSTRAINT fk_account_quotas_account FOREIGN KEY (account_id) REFERENCES accounts(id) ON DELETE CASCADE;
ALTER TABLE ONLY account_user_slots
    ADD CONSTRAINT fk_account_user_slots_account FOREIGN KEY (account_id) REFERENCES accounts(id) ON DELETE CASCADE;
ALTER TABLE ONLY agents
    ADD CONSTRAINT fk_agents_account FOREIGN KEY (account_id) REFERENCES accounts(id) ON DELETE CASCADE;
ALTER TABLE ONLY api_keys
    ADD CONSTRAINT fk_api_keys_account FOREIGN KEY (account_id) REFERENCES accounts(id) ON DELETE CASCADE;
ALTER TABLE ONLY attribute_values
    ADD CONSTRAINT fk_attribute_values_attribute FOREIGN KEY (attribute_id) REFERENCES catalog_attributes(id) ON DELETE CASCADE;
ALTER TABLE ONLY attribute_values
    ADD CONSTRAINT fk_attribute_values_user FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE;
ALTER TABLE ONLY catalog_attributes
    ADD CONSTRAINT fk_catalog_attributes_account FOREIGN KEY (account_id) REFERENCES accounts(id) ON DELETE CASCADE;
ALTER TABLE ONLY catalog_groups
    ADD CONSTRAINT fk_catalog_groups_account FOREIGN KEY (account_id) REFERENCES accounts(id) ON DELETE CASCADE;
ALTER TABLE ONLY deployments
    ADD CONSTRAINT fk_deployments_account FOREIGN KEY (account_id) REFERENCES accounts(id) ON DELETE CASCADE;
ALTER TABLE ONLY embed_tenants
    ADD CONSTRAINT fk_embed_tenants_account FOREIGN KEY (account_id) REFERENCES accounts(id) ON DELETE CASCADE;
ALTER TABLE ONLY group_members
    ADD CONSTRAINT fk_group_members_group FOREIGN KEY (group_id) REFERENCES catalog_groups(id) ON DELETE CASCADE;
ALTER TABLE ONLY group_members
    ADD CONSTRAINT fk_group_members_user FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE;
ALTER TABLE ONLY sessions
    ADD CONSTRAINT fk_sessions_user FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE;
ALTER TABLE ONLY thread_messages
    ADD CONSTRAINT fk_threads_messages FOREIGN KEY (account_id, chat_id) REFERENCES threads(account_id, chat_id) ON DELETE CASCADE;
ALTER TABLE ONLY threads
    ADD CONSTRAINT fk_threads_user FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE;
ALTER TABLE ONLY tokens
    ADD CONSTRAINT fk_tokens_user FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE;
ALTER TABLE ONLY users
    ADD CONSTRAINT fk_users_account FOREIGN KEY (account_id) REFERENCES accounts(id) ON DELETE CASCADE;
