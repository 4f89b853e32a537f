import pytest
import yaml
from sqlalchemy import func, select

from jobs.errors import RoadmapError
from jobs.gates.roadmap import load_roadmap, parse_roadmap, sync_roadmap
from jobs.store.models import RoadmapRow

GOOD_ROW = dict(id="ROAD-TEST-ONE", title="t", metric="output_tok_s", engine="roadgate", comparison="≥",
                threshold={"ratio": 1.2, "peer": "hf-transformers"}, workload="nano-bench", hardware="H200",
                max_age_days=7, validity={"min_samples": 10})


def document(*rows) -> str:
    return yaml.safe_dump({"rows": list(rows)}, allow_unicode=True)


def with_field(**changes) -> dict:
    return {**GOOD_ROW, **changes}


def test_the_shipped_roadmap_is_valid():
    rows = load_roadmap()
    assert rows and all(r.id.startswith("ROAD-") for r in rows)


def test_a_good_row_is_parsed_and_normalised():
    (row,) = parse_roadmap(document(GOOD_ROW))
    assert (row.comparison, row.threshold, row.peer_engine, row.hardware_class) == (">=", 1.2, "hf-transformers", "H200")


@pytest.mark.parametrize("row, message", [
    (with_field(comparison=">"), "row ROAD-TEST-ONE: field 'comparison'"),
    (with_field(metric="tok_s"), "row ROAD-TEST-ONE: field 'metric': unknown metric 'tok_s'"),
    (with_field(workload="nano"), "row ROAD-TEST-ONE: field 'workload': unknown workload 'nano'"),
    (with_field(threshold="fast"), "row ROAD-TEST-ONE: field 'threshold'"),
    (with_field(threshold={"ratio": 1.0}), "row ROAD-TEST-ONE: field 'threshold'"),
    (with_field(max_age_days=0), "row ROAD-TEST-ONE: field 'max_age_days'"),
    (with_field(validity={"min_sample": 3}), "row ROAD-TEST-ONE: field 'validity.min_sample': unknown"),
    (with_field(validity={"min_samples": "many"}), "row ROAD-TEST-ONE: field 'validity.min_samples'"),
    (with_field(id="road-lower"), "row road-lower: field 'id'"),
    (with_field(colour="red"), "row ROAD-TEST-ONE: field 'colour': unknown"),
    ({k: v for k, v in GOOD_ROW.items() if k != "title"}, "row ROAD-TEST-ONE: field 'title': missing"),
])
def test_a_malformed_row_names_the_row_and_the_field(row, message):
    with pytest.raises(RoadmapError, match=message.replace("(", r"\(")):
        parse_roadmap(document(row))


def test_duplicate_row_ids_are_refused():
    with pytest.raises(RoadmapError, match="row ROAD-TEST-ONE: field 'id': duplicate"):
        parse_roadmap(document(GOOD_ROW, with_field(title="again")))


def test_not_yaml_or_no_rows():
    with pytest.raises(RoadmapError, match="not valid YAML"):
        parse_roadmap("rows: [unclosed")
    with pytest.raises(RoadmapError, match="'rows' list"):
        parse_roadmap("rows: 3")


def test_sync_mirrors_the_file_and_retires_removed_rows(store):
    sync_roadmap(store, parse_roadmap(document(GOOD_ROW, with_field(id="ROAD-TEST-TWO"))))
    sync_roadmap(store, parse_roadmap(document(with_field(threshold=900))))
    with store.session() as session:
        rows = {r.id: r for r in session.scalars(select(RoadmapRow))}
    assert rows["ROAD-TEST-ONE"].threshold == 900 and rows["ROAD-TEST-ONE"].peer_engine is None
    assert rows["ROAD-TEST-ONE"].retired_at is None and rows["ROAD-TEST-TWO"].retired_at is not None


def test_a_row_the_file_did_not_change_keeps_its_sync_time(store):
    def synced():
        with store.session() as session:
            return {r.id: (r.synced_at, r.retired_at) for r in session.scalars(select(RoadmapRow))}
    sync_roadmap(store, parse_roadmap(document(GOOD_ROW, with_field(id="ROAD-TEST-TWO"))))
    first = synced()
    sync_roadmap(store, parse_roadmap(document(GOOD_ROW, with_field(id="ROAD-TEST-TWO"))))
    assert synced() == first
    sync_roadmap(store, parse_roadmap(document(GOOD_ROW, with_field(id="ROAD-TEST-TWO", title="edited"))))
    second = synced()
    assert second["ROAD-TEST-ONE"] == first["ROAD-TEST-ONE"] and second["ROAD-TEST-TWO"][0] > first["ROAD-TEST-TWO"][0]
    sync_roadmap(store, parse_roadmap(document(GOOD_ROW)))                       # TWO retired ...
    sync_roadmap(store, parse_roadmap(document(GOOD_ROW, with_field(id="ROAD-TEST-TWO", title="edited"))))
    third = synced()                                                               # ... and back, as it was
    assert third["ROAD-TEST-TWO"][1] is None and third["ROAD-TEST-TWO"][0] > second["ROAD-TEST-TWO"][0]
    assert third["ROAD-TEST-ONE"] == first["ROAD-TEST-ONE"]


def test_a_bad_file_writes_nothing(store, tmp_path, monkeypatch, capsys):
    from jobs import cli
    bad = tmp_path / "roadmap.yaml"
    bad.write_text(document(GOOD_ROW, with_field(id="ROAD-TEST-TWO", workload="nope")))
    monkeypatch.setattr(cli, "COMMANDS", ["jobs.store_cli"])
    code = cli.main(["gates", "sync", "--roadmap", str(bad), "--db-url", store.engine.url.render_as_string(False)])
    assert code == 2
    assert "row ROAD-TEST-TWO: field 'workload': unknown workload 'nope'" in capsys.readouterr().err
    with store.session() as session:
        assert session.scalar(select(func.count()).select_from(RoadmapRow)) == 0
