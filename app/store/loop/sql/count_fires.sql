-- The claim in steps (app/store/dialects/stepwise.py), between the lease and the read-back:
-- first claims counted as firings of their schedules (:fired, each with :count of them; one
-- statement per distinct count, almost always one), `last_fired_at` the instant the
-- latest first claim of :firsts is sent (its `leased_at`: now, or the due instant of one
-- claimed ahead), read once the lease is written; else :now.
UPDATE schedules SET
    fire_count = schedules.fire_count + :count,
    last_fired_at = coalesce((
        SELECT max(fired.leased_at) FROM occurrences AS fired
        WHERE fired.schedule_id = schedules.id AND fired.occurrence_id IN :firsts
    ), :now)
WHERE schedules.id IN :fired
