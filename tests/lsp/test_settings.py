from server.lsp.settings import Settings, read_settings


def test_nested_and_dotted_settings_read_the_same():
    nested, _ = read_settings({"target": "arm-neon", "runner": {"url": "http://box:8470", "tokenFile": "~/t"},
                               "repetitions": 5, "measure": {"automatic": False}, "tune": {"budget": 40}})
    dotted, _ = read_settings({"dojo": {"target": "arm-neon", "runner.url": "http://box:8470",
                                        "runner.tokenFile": "~/t", "repetitions": 5, "measure.automatic": False,
                                        "tune.budget": 40}})
    assert nested == dotted == Settings("arm-neon", "http://box:8470", "~/t", 5, False, 40)


def test_a_wrong_value_keeps_its_default_and_is_reported():
    settings, problems = read_settings({"target": "gpu9000", "repetitions": True, "measure": {"automatic": "yes"}})
    assert settings == Settings()
    assert [p.split(" is ")[0] for p in problems] == ["setting `dojo.target`", "setting `dojo.repetitions`",
                                                      "setting `dojo.measure.automatic`"]
    assert "expected one of native" in problems[0]


def test_ranking_the_quick_fixes_is_on_unless_turned_off():
    assert Settings().rank_quick_fixes
    assert read_settings({"agent": {"rankQuickFixes": False}}) == (Settings(rank_quick_fixes=False), [])
    assert read_settings({"agent.rankQuickFixes": False})[0] == Settings(rank_quick_fixes=False)
    settings, problems = read_settings({"agent": {"rankQuickFixes": "no"}})
    assert settings == Settings()
    assert problems == ["setting `dojo.agent.rankQuickFixes` is 'no'; expected true or false"]


def test_unknown_keys_and_nulls_are_ignored():
    assert read_settings({"server": {"path": "/x"}, "target": None}) == (Settings(), [])
    assert read_settings(None) == (Settings(), [])
