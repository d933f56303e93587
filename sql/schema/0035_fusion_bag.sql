-- A fusion model may be a bag: N LightGBM models fitted with N seeds (`stark-pg train fusion --bag N`),
-- scoring by their mean. Each one's text is kept, in seed order, so that `--explain` can average their
-- contributions; score_sql already holds the bag (every tree of every model, summed, divided by N).
-- A model trained before this migration becomes a bag of one.

alter table stark.fusion_model alter column booster type text[] using array[booster];
alter table stark.fusion_model rename column booster to boosters;
comment on column stark.fusion_model.boosters is
    'LightGBM''s model text (Booster.model_to_string) of each model of the bag, in seed order; one without --bag.';
