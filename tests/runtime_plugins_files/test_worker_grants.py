"""The worker is told which refs it holds: host/files/list on request, and a notification on each new grant."""
from .conftest import BOTH, READER, WRITER, invoke, output, upload, upload_directory


def listed(api, plugin_id):
    return {r["ref"]: r for r in invoke(api, plugin_id, "files/list")["refs"]}


def test_host_files_list_answers_the_workers_own_refs(api, host):
    mine = upload(api, BOTH, "mine.txt", b"m").get_json()["ref"]
    theirs = upload(api, READER, "theirs.txt", b"t").get_json()["ref"]
    held = listed(api, BOTH)
    assert mine in held and theirs not in held
    assert theirs in listed(api, READER) and mine not in listed(api, READER)
    entry = held[mine]
    assert set(entry) == {"ref", "kind", "access", "source", "name", "path", "size"}
    assert (entry["kind"], entry["access"], entry["name"]) == ("file", "read", "mine.txt")
    assert entry["path"].startswith(str(host.data_dir))


def test_host_files_list_matches_every_grant(api):
    refs = {upload(api, BOTH, "a.txt").get_json()["ref"],
            upload_directory(api, BOTH, {"d/x": b"x"}).get_json()["ref"],
            output(api, BOTH).get_json()["ref"]}
    assert refs <= set(listed(api, BOTH))


def test_a_running_worker_is_notified_of_a_new_grant(api):
    invoke(api, BOTH, "files/notified")  # the worker is running from here on
    ref = output(api, BOTH).get_json()["ref"]
    grants = invoke(api, BOTH, "files/notified")["grants"]
    latest = {r["ref"]: r for r in grants[-1]["refs"]}
    assert ref in latest and latest[ref]["path"] and latest[ref]["access"] == "read-write"
    assert set(latest) == set(listed(api, BOTH))  # the notification carries the full current list


def test_other_workers_are_not_told(api):
    invoke(api, BOTH, "files/notified")
    before = invoke(api, BOTH, "files/notified")["grants"]
    ref = upload(api, READER).get_json()["ref"]
    after = invoke(api, BOTH, "files/notified")["grants"]
    assert after == before
    assert all(ref not in {r["ref"] for r in g["refs"]} for g in after)


def test_a_grant_to_a_stopped_worker_is_listed_when_it_starts(api):
    assert api.patch(f"/api/plugin-packages/{WRITER}/enabled", json={"enabled": False}).status_code == 200
    status = api.get(f"/api/plugin-runtime/{WRITER}/status").get_json()
    assert status["pid"] is None
    ref = output(api, WRITER).get_json()["ref"]
    assert api.patch(f"/api/plugin-packages/{WRITER}/enabled", json={"enabled": True}).status_code == 200
    assert ref in listed(api, WRITER)
    assert invoke(api, WRITER, "files/notified") == {"grants": []}  # it learned by asking
