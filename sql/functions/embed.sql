-- Text in, ranking out, in SQL: stark.embed (a question's vector, from the embedding endpoint the
-- database owner set) and stark.search (any LLM-free method from the question's text, ranked as
-- `stark-pg search` ranks it: the same SQL functions, with the same defaults and settings).
--
-- Outbound HTTP from the server is the risk, so it has one door. The `http` extension (pgsql-http) lives
-- in its own schema, stark_http, and its functions are revoked from PUBLIC (and so from stark_agent and
-- every role the owner did not grant them to): only stark.embed, SECURITY DEFINER, calls them, and only
-- to the URL in stark_embed.endpoint, a table only the owner can read or write (sql/schema/0042). No
-- caller passes a URL; the request has a timeout; what came back is cached in stark_embed.cache by model
-- and text.

-- The schema the http extension was created in (NULL: not created in this database).
create or replace function stark.http_schema() returns name
language sql stable as $$
    select n.nspname from pg_extension e join pg_namespace n on n.oid = e.extnamespace where e.extname = 'http'
$$;
comment on function stark.http_schema() is
    'Internal: the schema of the http extension (pgsql-http) in this database, NULL if it is not created.';

-- Revoke every function of the http extension from PUBLIC and from stark_agent, wherever it was created
-- (by stark-pg in stark_http, or by someone in public: then only its own functions, not the schema's).
-- Run by stark.embed_endpoint_set and by every install of these functions; a role that does not own the
-- extension's functions cannot revoke and is told so.
create or replace function stark.embed_http_lockdown() returns int
language plpgsql as $$
declare
    f regprocedure;
    n int := 0;
    schema_name name := stark.http_schema();
begin
    if schema_name is null then
        return 0;
    end if;
    for f in select p.oid::regprocedure from pg_depend d join pg_proc p on p.oid = d.objid
             where d.classid = 'pg_proc'::regclass and d.refclassid = 'pg_extension'::regclass and d.deptype = 'e'
               and d.refobjid = (select e.oid from pg_extension e where e.extname = 'http')
    loop
        execute format('revoke all on function %s from public', f);
        if exists (select 1 from pg_roles where rolname = 'stark_agent') then
            execute format('revoke all on function %s from stark_agent', f);
        end if;
        n := n + 1;
    end loop;
    if schema_name <> 'public' then
        execute format('revoke all on schema %I from public', schema_name);
    end if;
    return n;
end
$$;
comment on function stark.embed_http_lockdown() is
    'Internal: revokes the http extension''s functions from PUBLIC and stark_agent (only stark.embed calls them); returns how many.';

-- The name a query vector's model goes by (stark_pg.embed.canonical_name: the default's aliases are one).
create or replace function stark.embed_model_name(model text) returns text
language sql immutable as $$
    select case when model is null or lower(model) in ('all-minilm-l6-v2', 'sentence-transformers/all-minilm-l6-v2',
                                                         'default')
                then 'all-MiniLM-L6-v2' else model end
$$;
comment on function stark.embed_model_name(text) is
    'The name an embedding model is stored and cached under (all-MiniLM-L6-v2''s aliases collapse to it).';

-- Set where stark.embed asks (the database owner only: EXECUTE is revoked from PUBLIC). `url` is the
-- endpoint's base (http(s)://HOST[:PORT][/PATH]); a trailing /v1 or /v1/embeddings is dropped, stark.embed
-- posts to URL/v1/embeddings. Creates the http extension in schema stark_http where the server has it.
create or replace function stark.embed_endpoint_set(url text, api_key text default null,
                                                    timeout_ms int default 10000)
returns text
language plpgsql as $$
declare
    base text := regexp_replace(coalesce(url, ''), '(/v1(/embeddings)?)?/*$', '');
begin
    if base !~ '^https?://[^\s/?#]+(/[^\s?#]*)?$' then
        raise exception 'embed_endpoint_set url must be http://HOST[:PORT][/PATH] or https://..., not %',
            coalesce(quote_literal(url), 'NULL') using errcode = 'invalid_parameter_value';
    end if;
    perform stark.check_count('embed_endpoint_set', 'timeout_ms', timeout_ms, 1, 600000);
    if stark.http_schema() is null then
        if not exists (select 1 from pg_available_extensions where name = 'http') then
            raise exception 'this PostgreSQL server has no http extension (pgsql-http), which stark.embed calls '
                            'its endpoint with'
                using errcode = 'feature_not_supported',
                      hint = 'the embedded server of stark-pg ships it; on your own server install pgsql-http '
                             '(e.g. the postgresql-NN-http package)';
        end if;
        create schema if not exists stark_http;
        revoke all on schema stark_http from public;
        create extension http schema stark_http;
    end if;
    perform stark.embed_http_lockdown();
    insert into stark_embed.endpoint as e (url, api_key, timeout_ms) values (base, api_key, timeout_ms)
    on conflict (singleton) do update
        set url = excluded.url, api_key = excluded.api_key, timeout_ms = excluded.timeout_ms, set_at = now();
    return base;
end
$$;
comment on function stark.embed_endpoint_set(text, text, int) is
    'Database owner only: the embedding endpoint stark.embed posts to (URL/v1/embeddings), its API key and timeout.';
revoke all on function stark.embed_endpoint_set(text, text, int) from public;

-- A question's vector under an embedding model: from stark_embed.cache, else from the endpoint
-- (OpenAI's embeddings protocol: {"model": ..., "input": text} to URL/v1/embeddings, the vector in
-- data[0].embedding; an embedding API model `openai:NAME` is asked for as NAME), then cached (unless the transaction is read-only). SECURITY DEFINER: it runs
-- with its owner's rights, the only rights that reach the http extension and the endpoint's row.
create or replace function stark.embed(query text, model text default 'all-MiniLM-L6-v2')
returns vector
language plpgsql volatile security definer set search_path = pg_catalog, stark, public, pg_temp as $$
declare
    m text := stark.embed_model_name(model);
    key text := md5(query);
    v vector;
    e record;
    http name := stark.http_schema();
    reply record;
    answer jsonb;
begin
    if query is null or btrim(query) = '' then
        raise exception 'embed query must be a non-empty text, not %', coalesce(quote_literal(query), 'NULL')
            using errcode = 'invalid_parameter_value';
    end if;
    select c.vec into v from stark_embed.cache c where c.model = m and c.body_md5 = key and c.body = query;
    if found then
        return v;
    end if;
    select * into e from stark_embed.endpoint;
    if not found then
        raise exception 'stark.embed has no embedding endpoint set'
            using errcode = 'object_not_in_prerequisite_state',
                  hint = 'the database owner runs `stark-pg db embedding-endpoint http://127.0.0.1:8000` with '
                         '`stark-pg serve` running there (it answers /v1/embeddings), or names any '
                         'OpenAI-compatible endpoint (TEI, vLLM, OpenAI)';
    end if;
    if http is null then
        raise exception 'stark.embed needs the http extension (pgsql-http), which is not created in this database'
            using errcode = 'object_not_in_prerequisite_state',
                  hint = 'the database owner runs `stark-pg db embedding-endpoint URL`, which creates it';
    end if;
    execute format('select %1$I.http_set_curlopt(''CURLOPT_TIMEOUT_MS'', $1), '
                   '%1$I.http_set_curlopt(''CURLOPT_CONNECTTIMEOUT_MS'', $1)', http) using e.timeout_ms::text;
    begin
        execute format('select r.status, r.content from %1$I.http((''POST'', $1, '
                       'case when $2 is null then null else array[%1$I.http_header(''Authorization'', ''Bearer '' || $2)] end, '
                       '''application/json'', $3)::%1$I.http_request) r', http)
            into reply
            using e.url || '/v1/embeddings', e.api_key,
                  jsonb_build_object('model', regexp_replace(m, '^openai:', '', 'i'), 'input', query)::text;
    exception when others then
        raise exception 'stark.embed: the embedding endpoint % did not answer within % ms: %', e.url,
            e.timeout_ms, sqlerrm using errcode = 'connection_failure';
    end;
    begin
        answer := reply.content::jsonb;
    exception when others then
        answer := null;
    end;
    if reply.status <> 200 then
        raise exception 'stark.embed: the embedding endpoint % answered HTTP % for model %: %', e.url, reply.status,
            quote_literal(m), coalesce(answer #>> '{error,message}', answer ->> 'error', left(reply.content, 200))
            using errcode = 'connection_failure';
    end if;
    if jsonb_typeof(answer #> '{data,0,embedding}') is distinct from 'array' then
        raise exception 'stark.embed: the embedding endpoint % sent no data[0].embedding array for model %', e.url,
            quote_literal(m) using errcode = 'connection_failure';
    end if;
    v := (answer #>> '{data,0,embedding}')::vector;
    if not current_setting('transaction_read_only')::boolean then
        insert into stark_embed.cache (model, body_md5, body, vec) values (m, key, query, v)
        on conflict do nothing;
    end if;
    return v;
end
$$;
comment on function stark.embed(text, text) is
    'The vector of `query` under an embedding model, from the endpoint the database owner set (cached by model and text).';

-- ---------------------------------------------------------------------------------------------------
-- stark.search's settings: `options` values by name, typed, with an error naming the method and the
-- setting when a value is not of its type (what `-o KEY=VALUE` of `stark-pg search` would refuse).
create or replace function stark.search_option(options jsonb, method text, setting text, kind text)
returns text
language plpgsql immutable as $$
declare
    value text := options ->> setting;
begin
    if value is null then
        return null;
    end if;
    begin
        case kind
            when 'float' then perform value::double precision;
            when 'int' then perform value::int;
            when 'bool' then perform value::boolean;
            else null;
        end case;
    exception when others then
        raise exception 'search % option % must be % (a %), not %', method, setting,
            case kind when 'int' then 'an integer' when 'float' then 'a number' else 'true or false' end, kind,
            quote_literal(value) using errcode = 'invalid_parameter_value';
    end;
    return value;
end
$$;
comment on function stark.search_option(jsonb, text, text, text) is
    'Internal: one setting of stark.search''s options as text, checked to be of its kind (float, int, bool, text).';

-- The settings each method takes (its Options in stark_pg/retrieve/METHOD.py that SQL can honour).
create or replace function stark.search_settings(method text) returns text[]
language sql immutable as $$
    select case method
        when 'bm25' then array['k1', 'b', 'field', 'engine']
        when 'vss' then array['model', 'exact', 'ef_search']
        when 'multivss' then array['model', 'agg', 'top', 'pool', 'exact', 'ef_search']
        when 'hybrid' then array['fusion', 'weight', 'pool', 'rrf_k', 'model', 'ef_search']
        when 'mfar' then array['name', 'mask', 'pool', 'k1', 'b', 'engine']
        when 'fusion' then array['name']
    end
$$;
comment on function stark.search_settings(text) is
    'The options stark.search takes for a method (the names of `-o` of `stark-pg search`).';

-- A query's vector for VSS (stark_pg/retrieve/vss.py query_vector): an imported model's vector of the
-- SKB's query with exactly this text, or the vector of its query model, or stark.embed's.
create or replace function stark.search_query_vector(skb int, query text, model text) returns vector
language plpgsql volatile as $$
declare
    query_model text;
    v vector;
begin
    select b.settings -> 'imported' ->> 'query_model',
           (select qv.vec from stark.query q
            join stark.query_vector qv on qv.skb_id = q.skb_id and qv.query_id = q.query_id and qv.model = m.name
            where q.skb_id = b.skb_id and q.body = search_query_vector.query and qv.body_md5 = md5(q.body)
            order by q.query_id limit 1)
      into query_model, v
    from stark.embedding_build b join stark.embedding_model m on m.model_id = b.model_id
    where b.skb_id = skb and m.name = model and b.settings ? 'imported';
    if not found then
        return stark.embed(query, model);
    end if;
    if v is not null then
        return v;
    end if;
    if query_model is null then
        raise exception 'model % holds imported vectors and the query has none', quote_literal(model)
            using errcode = 'invalid_parameter_value',
                  hint = 'only queries of the SKB whose vectors were imported can be searched with it';
    end if;
    return stark.embed(query, query_model);
end
$$;
comment on function stark.search_query_vector(int, text, text) is
    'Internal: the query vector VSS searches with: an imported one matched by text, else stark.embed''s.';

-- mFAR's weights of a query (stark_pg/models/mfar.py MfarModel.weights): softmax(W q + b) * gamma over
-- the model's (field, scorer) pairs, zero for the pairs `mask` names (FIELD[:lexical|dense], comma-separated).
create or replace function stark.mfar_weights(mm stark.mfar_model, qvec vector, mask text default null)
returns double precision[]
language plpgsql stable as $$
declare
    dim int := vector_dims(qvec);
    weights double precision[];
    part text;
    field_name text;
    scorer text;
    hit boolean;
begin
    if cardinality(mm.gate_weight) <> cardinality(mm.gate_bias) * dim then
        raise exception 'mFAR model % gates % dimensions, the query vector has %', quote_literal(mm.name),
            cardinality(mm.gate_weight) / greatest(cardinality(mm.gate_bias), 1), dim
            using errcode = 'invalid_parameter_value';
    end if;
    with q as (select x.v::double precision as v, x.i from unnest(qvec::real[]) with ordinality as x(v, i)),
    w as (select x.w, x.i from unnest(mm.gate_weight) with ordinality as x(w, i)),      -- row-major pairs x dim
    logits as (
        select p.p, mm.gate_bias[p.p] + sum(w.w * q.v) as l
        from generate_subscripts(mm.gate_bias, 1) as p(p)
        join w on w.i > (p.p - 1) * dim and w.i <= p.p * dim
        join q on q.i = w.i - (p.p - 1) * dim
        group by p.p),
    e as (select l.p, exp(l.l - max(l.l) over ()) as x from logits l),
    g as (select e.p, e.x / sum(e.x) over () as g from e)
    select array_agg(g.g * mm.gammas[g.p] order by g.p) into weights from g;
    foreach part in array string_to_array(coalesce(mask, ''), ',') loop
        part := btrim(part);
        continue when part = '';
        if part ~ ':(lexical|dense)$' then
            field_name := regexp_replace(part, ':(lexical|dense)$', '');
            scorer := substring(part from ':(lexical|dense)$');
        else
            field_name := part;
            scorer := null;
        end if;
        hit := false;
        for i in 1 .. cardinality(mm.fields) loop
            if mm.fields[i] = field_name and (scorer is null or mm.scorers[i] = scorer) then
                weights[i] := 0;
                hit := true;
            end if;
        end loop;
        if not hit then
            raise exception 'search mfar option mask %: model % has no such pair (pairs: %)', quote_literal(part),
                quote_literal(mm.name),
                (select string_agg(f || ':' || s, ', ') from unnest(mm.fields, mm.scorers) as x(f, s))
                using errcode = 'invalid_parameter_value';
        end if;
    end loop;
    return weights;
end
$$;
comment on function stark.mfar_weights(stark.mfar_model, vector, text) is
    'mFAR: the weight of each (field, scorer) pair of a stored model for a query vector, softmax(W q + b) * gamma, masked.';

-- Learned fusion's ranking (sql/templates/fusion.sql `rank`, which stark_pg/retrieve/fusion.py runs): the
-- stored model's compiled score over stark.fusion_features of every candidate. What SQL cannot compute
-- is refused: a model trained with --dense reads the question under each fold's fine-tuned encoder.
create or replace function stark.fusion_rank(skb_name text, query text, name text default 'default',
                                             k int default 10)
returns table (node_id bigint, score double precision)
language plpgsql volatile as $$
declare
    skb int := stark.require_skb(skb_name);
    fm stark.fusion_model;
    n int;
    computed text[];
    pair_fields text[];
    pair_scorers text[];
    s jsonb;
begin
    perform stark.check_count('fusion', 'k', k, 0, stark.k_max());
    select * into fm from stark.fusion_model f where f.skb_id = skb and f.name = fusion_rank.name;
    if not found then
        raise exception 'no fusion model % for SKB % (trained: %)', quote_literal(name), quote_literal(skb_name),
            coalesce((select string_agg(f.name, ', ' order by f.name) from stark.fusion_model f where f.skb_id = skb),
                     'none')
            using errcode = 'invalid_parameter_value',
                  hint = format('run `stark-pg train fusion %s --name %s`', skb_name, name);
    end if;
    s := fm.settings;
    if s ->> 'dense' is not null then
        raise exception 'fusion model % was trained with --dense %, whose feature embeds the question with each fold''s '
                        'fine-tuned encoder: stark.search does not; use `stark-pg search`',
            quote_literal(fm.name), s ->> 'dense' using errcode = 'feature_not_supported';
    end if;
    n := cardinality(fm.features);
    computed := stark.fusion_feature_names(skb_name, fm.embed_model, false);
    if computed[1:n] is distinct from fm.features then
        raise exception 'fusion model % of SKB % was trained on other features than are computed now: retrain it',
            quote_literal(fm.name), quote_literal(skb_name) using errcode = 'invalid_parameter_value';
    end if;
    select array_agg(m[1] order by o), array_agg(m[2] order by o) into pair_fields, pair_scorers
    from unnest(fm.features) with ordinality as f(feature, o),
         regexp_match(f.feature, '^(.*)\|(lexical|dense)$') as m
    where m is not null;
    return query execute format(
        'with c as materialized (
             select x.node_id, %s
             from stark.fusion_features($1, $2, $3, $4, $5, $6, $7,
                                        dense_models => null::text[], dense_qvecs => null::vector[],
                                        pair_fields => $8, pair_scorers => $9, pool_splits => $10) as x)
         select c.node_id, %s as score
         from c
         order by score desc, c.node_id
         limit $11',
        (select string_agg(format('x.f[%s] as f%s', i, i), ', ' order by i) from generate_series(1, n) i),
        fm.score_sql)
        using skb_name, query, stark.embed(query, fm.embed_model), fm.embed_model, (s ->> 'pool')::int,
              (s ->> 'knn')::int, (s ->> 'link')::int, coalesce(pair_fields, '{}'), coalesce(pair_scorers, '{}'),
              coalesce(array(select jsonb_array_elements_text(s -> 'splits')), '{train}'), k;
end
$$;
comment on function stark.fusion_rank(text, text, text, int) is
    'Learned fusion from a question''s text: the stored model''s compiled score over stark.fusion_features, top k.';

-- mFAR from a question's text: the stored model's weights for the question's vector, then stark.mfar.
create or replace function stark.mfar_rank(skb_name text, query text, name text default 'all', k int default 10,
                                           mask text default null, pool int default 100,
                                           k1 double precision default 1.2, b double precision default 0.75,
                                           engine text default 'auto')
returns table (node_id bigint, score double precision)
language plpgsql volatile as $$
declare
    skb int := stark.require_skb(skb_name);
    mm stark.mfar_model;
    qvec vector;
begin
    select * into mm from stark.mfar_model m where m.skb_id = skb and m.name = mfar_rank.name;
    if not found then
        raise exception 'no mFAR model % for SKB % (trained: %)', quote_literal(name), quote_literal(skb_name),
            coalesce((select string_agg(m.name, ', ' order by m.name) from stark.mfar_model m where m.skb_id = skb),
                     'none')
            using errcode = 'invalid_parameter_value',
                  hint = format('run `stark-pg train mfar %s`', skb_name);
    end if;
    -- the question's encoder: a fine-tuned copy when the model was trained with one (the endpoint must serve it)
    qvec := stark.embed(query, coalesce(mm.settings ->> 'query_encoder', mm.embed_model));
    return query select r.node_id, r.score
                 from stark.mfar(skb_name, query, qvec, mm.embed_model, mm.fields, mm.scorers,
                                 stark.mfar_weights(mm, qvec, mask), mm.means, mm.scales, k, pool, k1, b, engine) r;
end
$$;
comment on function stark.mfar_rank(text, text, text, int, text, int, double precision, double precision, text) is
    'mFAR from a question''s text: the stored model''s query-conditioned weights, then stark.mfar, top k.';

-- The ranking of one LLM-free method from a question's text (stark.search adds the nodes' type and name):
-- each method's SQL function with the defaults of its Options in stark_pg/retrieve/METHOD.py; hybrid given
-- none of its fusion settings takes those `stark-pg tune` stored for the SKB (stark.tuned_options).
create or replace function stark.search_ranking(skb text, query text, method text, k int, o jsonb)
returns table (node_id bigint, score double precision)
language plpgsql volatile as $$
declare
    model text := stark.embed_model_name(stark.search_option(o, method, 'model', 'text'));
begin
    if method = 'bm25' then
        return query select r.node_id, r.score
            from stark.bm25(skb, query, k, stark.search_option(o, method, 'field', 'text'),
                            coalesce(stark.search_option(o, method, 'k1', 'float')::float8, 1.2),
                            coalesce(stark.search_option(o, method, 'b', 'float')::float8, 0.75),
                            coalesce(stark.search_option(o, method, 'engine', 'text'), 'auto')) r;
    elsif method = 'vss' then
        return query select r.node_id, r.score
            from stark.vss(skb, stark.search_query_vector(stark.require_skb(skb), query, model), k, model,
                           coalesce(stark.search_option(o, method, 'exact', 'bool')::boolean, false)) r;
    elsif method = 'multivss' then
        return query select r.node_id, r.score
            from stark.multivss(skb, stark.embed(query, model), k, model,
                                coalesce(stark.search_option(o, method, 'agg', 'text'), 'max'),
                                coalesce(stark.search_option(o, method, 'top', 'int')::int, 3),
                                stark.search_option(o, method, 'pool', 'int')::int,
                                coalesce(stark.search_option(o, method, 'exact', 'bool')::boolean, false)) r;
    elsif method = 'hybrid' then
        if not o ?| stark.hybrid_tuned_keys() then
            o := coalesce(stark.tuned_options(stark.require_skb(skb), 'hybrid'), '{}'::jsonb) || o;
        end if;
        return query select r.node_id, r.score
            from stark.hybrid(skb, query, stark.embed(query, model), k,
                              coalesce(stark.search_option(o, method, 'fusion', 'text'), 'rrf'),
                              coalesce(stark.search_option(o, method, 'weight', 'float')::float8, 0.5),
                              coalesce(stark.search_option(o, method, 'pool', 'int')::int, 100),
                              coalesce(stark.search_option(o, method, 'rrf_k', 'int')::int, 60), model) r;
    elsif method = 'mfar' then
        return query select r.node_id, r.score
            from stark.mfar_rank(skb, query, coalesce(stark.search_option(o, method, 'name', 'text'), 'all'), k,
                                 stark.search_option(o, method, 'mask', 'text'),
                                 coalesce(stark.search_option(o, method, 'pool', 'int')::int, 100),
                                 coalesce(stark.search_option(o, method, 'k1', 'float')::float8, 1.2),
                                 coalesce(stark.search_option(o, method, 'b', 'float')::float8, 0.75),
                                 coalesce(stark.search_option(o, method, 'engine', 'text'), 'auto')) r;
    elsif method = 'fusion' then
        return query select r.node_id, r.score
            from stark.fusion_rank(skb, query, coalesce(stark.search_option(o, method, 'name', 'text'), 'default'),
                                   k) r;
    end if;
end
$$;
comment on function stark.search_ranking(text, text, text, int, jsonb) is
    'Internal: stark.search''s ranking, (node_id, score) best first, from one method''s SQL function.';

-- Any LLM-free method from a question's text, ranked as `stark-pg search SKB QUERY -m METHOD -k K -o ...`
-- ranks it: `options` holds the -o settings ({"fusion": "weighted", "weight": 0.3}). The question's vector
-- comes from stark.embed; the rest is the SQL the Python methods call.
create or replace function stark.search(skb text, query text, method text default 'hybrid', k int default 10,
                                        options jsonb default '{}')
returns table (node_id bigint, type text, name text, score double precision)
language plpgsql volatile as $$
declare
    skb_key int := stark.require_skb(skb);
    o jsonb := coalesce(options, '{}');
    unknown text;
    ef text;
    saved text := current_setting('stark.ef_search', true);
begin
    perform stark.check_choice('search', 'method', method, array['bm25', 'vss', 'multivss', 'hybrid', 'mfar', 'fusion']);
    perform stark.check_count('search', 'k', k, 0, stark.k_max());
    if query is null then
        raise exception 'search query must be a text, not NULL' using errcode = 'invalid_parameter_value';
    end if;
    if jsonb_typeof(o) <> 'object' then
        raise exception 'search options must be a JSON object ({"setting": value}), not %', o
            using errcode = 'invalid_parameter_value';
    end if;
    select string_agg(x, ', ') into unknown from jsonb_object_keys(o) x where x <> all (stark.search_settings(method));
    if unknown is not null then
        raise exception 'search % has no option %: its options are %', method, unknown,
            array_to_string(stark.search_settings(method), ', ') using errcode = 'invalid_parameter_value';
    end if;
    ef := stark.search_option(o, method, 'ef_search', 'int');
    if ef is not null then          -- what vss.ef_search_set does: stark.vss and stark.multivss read it
        perform stark.check_count(method, 'ef_search', ef::int, 1, 1000);
        perform set_config('stark.ef_search', ef, true);
    end if;
    return query
    select r.node_id, n.type, n.name, r.score
    from stark.search_ranking(skb, query, method, k, o) with ordinality as r(node_id, score, place)
    join stark.node n on n.skb_id = skb_key and n.node_id = r.node_id
    order by r.place;
    perform set_config('stark.ef_search', coalesce(saved, ''), true);
end
$$;
comment on function stark.search(text, text, text, int, jsonb) is
    'Any LLM-free method (bm25, vss, multivss, hybrid, mfar, fusion) from a question''s text: (node_id, type, name, score), best first.';

do $$
begin
    perform stark.embed_http_lockdown();
exception when insufficient_privilege then
    raise notice 'the http extension''s functions are not this role''s to revoke: their owner runs select stark.embed_http_lockdown()';
end
$$;
