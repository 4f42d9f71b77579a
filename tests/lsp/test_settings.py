from server.lsp.settings import Settings, read_settings


def test_nested_and_dotted_settings_read_the_same():
    nested, _ = read_settings({"target": "arm-neon", "runner": {"url": "https://box:8470", "tokenFile": "~/t"},
                               "repetitions": 5, "measure": {"automatic": False}, "tune": {"budget": 40}},
                              from_user=True)
    dotted, _ = read_settings({"dojo": {"target": "arm-neon", "runner.url": "https://box:8470",
                                        "runner.tokenFile": "~/t", "repetitions": 5, "measure.automatic": False,
                                        "tune.budget": 40}}, from_user=True)
    assert nested == dotted == Settings("arm-neon", "https://box:8470", "~/t", 5, False, 40)


def test_a_wrong_value_keeps_its_default_and_is_reported():
    settings, problems = read_settings({"target": "gpu9000", "repetitions": True, "measure": {"automatic": "yes"}},
                                       from_user=False)
    assert settings == Settings()
    assert [p.split(" is ")[0] for p in problems] == ["setting `dojo.target`", "setting `dojo.repetitions`",
                                                      "setting `dojo.measure.automatic`"]
    assert "expected one of native" in problems[0]


def test_ranking_the_quick_fixes_is_on_unless_turned_off():
    assert Settings().rank_quick_fixes
    assert read_settings({"agent": {"rankQuickFixes": False}}, from_user=False) == (Settings(rank_quick_fixes=False),
                                                                                     [])
    assert read_settings({"agent.rankQuickFixes": False}, from_user=False)[0] == Settings(rank_quick_fixes=False)
    settings, problems = read_settings({"agent": {"rankQuickFixes": "no"}}, from_user=False)
    assert settings == Settings()
    assert problems == ["setting `dojo.agent.rankQuickFixes` is 'no'; expected true or false"]


def test_unknown_keys_and_nulls_are_ignored():
    assert read_settings({"server": {"path": "/x"}, "target": None}, from_user=False) == (Settings(), [])
    assert read_settings(None, from_user=False) == (Settings(), [])


def test_only_the_user_chooses_the_runner_its_token_file_and_the_checkpoint():
    workspace = {"runner": {"url": "http://evil.example", "tokenFile": "~/.aws/credentials"},
                 "agent": {"checkpoint": "/tmp/pickle", "steps": 3}, "target": "cuda"}
    users = Settings(runner_url="https://gpu-box:8470", runner_token_file="~/.dojo/token",
                     agent_checkpoint="~/agent", repetitions=7)
    settings, problems = read_settings(workspace, users, from_user=False)
    assert settings == Settings(target="cuda", runner_url="https://gpu-box:8470", runner_token_file="~/.dojo/token",
                                agent_checkpoint="~/agent", agent_steps=3)
    assert problems == []
    assert read_settings(workspace, from_user=True)[0].runner_url == "http://evil.example"
