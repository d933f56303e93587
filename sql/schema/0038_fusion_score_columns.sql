-- A fusion model's compiled score reads its features as columns f1..fN (sql/templates/fusion.sql unpacks
-- each candidate's feature array into them) rather than as subscripts f[1]..f[N] of the array: the
-- interpreter evaluates a subscript again at every split of every tree, a column it only reads. Each
-- stored score is rewritten in place; the numbers, and so the ranking, are the same.
update stark.fusion_model set score_sql = regexp_replace(score_sql, '\mf\[(\d+)\]', 'f\1', 'g');
comment on column stark.fusion_model.score_sql is
    'The model as one SQL expression over the columns f1..fN (the features, in stark.fusion_feature_names'' order).';
