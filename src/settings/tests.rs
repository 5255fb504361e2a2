use super::*;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn err_of(file: &str, vars: &[(&str, &str)]) -> String {
    match build(Some((file, "my.toml")), &env(vars), &Flags::default()) {
        Ok(_) => panic!("expected an error"),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn embedded_file_is_the_compiled_in_defaults() {
    let from_file = parse(EMBEDDED, &[]).unwrap();
    let from_serde: Config = toml::from_str("").unwrap();
    assert_eq!(format!("{from_file:?}"), format!("{from_serde:?}"));
}

#[test]
fn environment_overrides_keys() {
    let cfg = parse(
        EMBEDDED,
        &env(&[
            ("MANNERLY_PROXY__LISTEN", "127.0.0.1:9999"),
            ("MANNERLY_PROXY__CONNECT_PORTS", "[443, 8443]"),
            ("MANNERLY_UPSTREAM__ALLOW_PRIVATE", "true"),
            ("MANNERLY_DATA_DIR", "/tmp/x"),
            ("MANNERLY_LOG", "debug"),
            ("MANNERLY_LOG_FORMAT", "json"),
        ]),
    )
    .unwrap();
    assert_eq!(cfg.proxy.listen.port(), 9999);
    assert_eq!(cfg.proxy.connect_ports, vec![443, 8443]);
    assert!(cfg.upstream.allow_private);
    assert_eq!(cfg.data_dir, PathBuf::from("/tmp/x"));
}

#[test]
fn lists_take_a_single_value_from_the_environment() {
    let cfg = parse(
        "",
        &env(&[
            ("MANNERLY_PROXY__CONNECT_PORTS", "8443"),
            ("MANNERLY_UPSTREAM__EXTRA_ROOTS", "/etc/ssl/corp.pem"),
            ("MANNERLY_CRAWLER__PURPOSES", "search"),
        ]),
    )
    .unwrap();
    assert_eq!(cfg.proxy.connect_ports, vec![8443]);
    assert_eq!(
        cfg.upstream.extra_roots,
        vec![PathBuf::from("/etc/ssl/corp.pem")]
    );
    assert_eq!(cfg.crawler.purposes.len(), 1);
}

#[test]
fn string_keys_take_the_variable_verbatim() {
    let cfg = parse(
        "",
        &env(&[
            ("MANNERLY_CRAWLER__AGENT", "1234"),
            ("MANNERLY_AUDIT__PATH", "-"),
        ]),
    )
    .unwrap();
    assert_eq!(cfg.crawler.agent, "1234");
    assert_eq!(cfg.audit.path, "-");
}

#[test]
fn a_bad_value_from_the_environment_names_key_value_and_variable() {
    let err = err_of("", &[("MANNERLY_BUDGET__MAX_RATE", "fast")]);
    assert!(
        err.starts_with(
            "budget.max_rate = \"fast\" (environment variable MANNERLY_BUDGET__MAX_RATE): invalid type"
        ),
        "{err}"
    );
    let err = err_of("", &[("MANNERLY_PROXY__CONNECT_PORTS", "[443, \"x\"]")]);
    assert!(
        err.contains("proxy.connect_ports = [443, \"x\"] (environment variable MANNERLY_PROXY__CONNECT_PORTS)"),
        "{err}"
    );
}

#[test]
fn a_bad_value_in_a_file_names_its_line() {
    let err = err_of(
        "# mine\n[budget]\nstart_rate = 1.0\nmax_rate = \"fast\"\n",
        &[],
    );
    assert!(
        err.starts_with("budget.max_rate = \"fast\" (my.toml line 4): invalid type"),
        "{err}"
    );
}

#[test]
fn toml_syntax_errors_name_file_and_line() {
    let err = err_of("[proxy]\nlisten = \n", &[]);
    assert!(err.starts_with("my.toml: not valid TOML"), "{err}");
    assert!(err.contains("line 2"), "{err}");
}

#[test]
fn unknown_keys_get_did_you_mean() {
    let err = err_of("[proxy]\nlisten_adr = \"x\"\n", &[]);
    assert_eq!(
        err,
        "unknown key proxy.listen_adr (my.toml line 2); did you mean proxy.listen?"
    );
    let err = err_of("", &[("MANNERLY_PROXY__LISTNE", "1")]);
    assert_eq!(
        err,
        "unknown key proxy.listne (environment variable MANNERLY_PROXY__LISTNE); did you mean MANNERLY_PROXY__LISTEN (proxy.listen)?"
    );
    let err = err_of("[proxy]\nallow_private = true\n", &[]);
    assert_eq!(
        err,
        "unknown key proxy.allow_private (my.toml line 2); did you mean upstream.allow_private?"
    );
    let err = err_of("[budgett]\nmax_rate = 1.0\n", &[]);
    assert_eq!(
        err,
        "unknown table budgett (my.toml line 2); did you mean budget.max_rate?"
    );
    let err = err_of("[budget.hosts.\"a.test\"]\nmax_rat = 1.0\n", &[]);
    assert_eq!(
        err,
        "unknown key budget.hosts.\"a.test\".max_rat (my.toml line 2); did you mean budget.hosts.\"a.test\".max_rate?"
    );
}

#[test]
fn listen_accepts_host_names() {
    let loaded = build(
        Some(("[proxy]\nlisten = \"localhost:3999\"\n", "my.toml")),
        &[],
        &Flags::default(),
    )
    .unwrap();
    assert_eq!(
        loaded.config.proxy.listen,
        "127.0.0.1:3999".parse().unwrap()
    );
    let err = err_of("[proxy]\nlisten = \"localhost\"\n", &[]);
    assert!(
        err.starts_with("proxy.listen = \"localhost\" (my.toml line 2): expected host:port"),
        "{err}"
    );
}

#[test]
fn values_that_parse_but_make_no_sense_name_their_source() {
    let err = err_of("", &[("MANNERLY_PROXY__MAX_HEADERS", "0")]);
    assert_eq!(
        err,
        "proxy.max_headers = 0 (environment variable MANNERLY_PROXY__MAX_HEADERS): must be at least 1"
    );
}

#[test]
fn flags_win_over_environment_and_file() {
    let flags = Flags {
        listen: Some("127.0.0.1:4000".into()),
        data_dir: Some(PathBuf::from("/tmp/flagged")),
        local: None,
    };
    let loaded = build(
        Some(("[proxy]\nlisten = \"127.0.0.1:1\"\n", "my.toml")),
        &env(&[("MANNERLY_PROXY__LISTEN", "127.0.0.1:2")]),
        &flags,
    )
    .unwrap();
    assert_eq!(loaded.config.proxy.listen.port(), 4000);
    assert_eq!(loaded.config.data_dir, PathBuf::from("/tmp/flagged"));
    let listen = &loaded.values[&vec!["proxy".to_string(), "listen".to_string()]];
    assert_eq!(listen.1, Source::Flag("--listen"));
}

#[test]
fn show_is_a_config_file_that_loads_to_the_same_config() {
    let loaded = build(
        Some(("[budget.hosts.\"a.test\"]\nmax_rate = 2.5\n", "my.toml")),
        &env(&[("MANNERLY_BUDGET__MAX_RATE", "3")]),
        &Flags::default(),
    )
    .unwrap();
    let shown = render(&loaded.values, "effective");
    assert!(
        shown.contains("max_rate = 3  # environment variable MANNERLY_BUDGET__MAX_RATE"),
        "{shown}"
    );
    assert!(
        shown.contains("max_rate = 2.5  # my.toml line 2"),
        "{shown}"
    );
    assert!(shown.contains("start_rate = 1.0  # default"), "{shown}");
    let again = build(Some((&shown, "shown.toml")), &[], &Flags::default()).unwrap();
    assert_eq!(
        format!("{:?}", again.config),
        format!("{:?}", loaded.config)
    );
}

#[test]
fn crawler_use_is_reference_full_or_undeclared() {
    use mannerly_policy::prefs::DeclaredUse;
    assert_eq!(
        parse(EMBEDDED, &[]).unwrap().crawler.usage,
        DeclaredUse::Undeclared
    );
    let cfg = parse("[crawler]\nuse = \"full\"\n", &[]).unwrap();
    assert_eq!(cfg.crawler.usage, DeclaredUse::Full);
    let cfg = parse("", &env(&[("MANNERLY_CRAWLER__USE", "reference")])).unwrap();
    assert_eq!(cfg.crawler.usage, DeclaredUse::Reference);
    let err = parse("[crawler]\nuse = \"everything\"\n", &[]).unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("use") && msg.contains("\"reference\", \"full\""),
        "{msg}"
    );
}

#[test]
fn local_allows_private_targets_trusts_the_origin_ca_and_stays_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("origin-ca.pem");
    std::fs::write(&ca, "not read here").unwrap();
    let flags = Flags {
        local: Some(ca.clone()),
        ..Flags::default()
    };
    let loaded = build(None, &env(&[]), &flags).unwrap();
    assert!(loaded.config.upstream.allow_private);
    assert_eq!(
        loaded.config.upstream.extra_roots,
        vec![std::fs::canonicalize(&ca).unwrap()]
    );
    let allow = &loaded.values[&vec!["upstream".to_string(), "allow_private".to_string()]];
    assert_eq!(allow.1, Source::Flag("--local"));

    let bare = Flags {
        local: Some(PathBuf::new()),
        ..Flags::default()
    };
    let loaded = build(None, &env(&[]), &bare).unwrap();
    assert!(loaded.config.upstream.allow_private);
    assert!(loaded.config.upstream.extra_roots.is_empty());

    let open = Flags {
        listen: Some("0.0.0.0:3128".into()),
        local: Some(PathBuf::new()),
        ..Flags::default()
    };
    let err = build(None, &env(&[]), &open).err().unwrap().to_string();
    assert!(err.starts_with("--local lets clients reach"), "{err}");
    assert!(err.contains("0.0.0.0:3128"), "{err}");

    let missing = Flags {
        local: Some(dir.path().join("nope.pem")),
        ..Flags::default()
    };
    let err = format!("{:#}", build(None, &env(&[]), &missing).err().unwrap());
    assert!(err.contains("nope.pem: the origin CA file"), "{err}");
}

#[test]
fn a_variable_with_one_underscore_before_the_key_names_the_one_meant() {
    let err = build(
        None,
        &env(&[("MANNERLY_PROXY_LISTEN", "127.0.0.1:1")]),
        &Flags::default(),
    )
    .err()
    .unwrap()
    .to_string();
    assert_eq!(
        err,
        "unknown key proxy_listen (environment variable MANNERLY_PROXY_LISTEN); did you mean MANNERLY_PROXY__LISTEN (proxy.listen)?"
    );
    let err = build(
        None,
        &env(&[("MANNERLY_BUDGET_MAX_RATE", "2")]),
        &Flags::default(),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.ends_with("did you mean MANNERLY_BUDGET__MAX_RATE (budget.max_rate)?"),
        "{err}"
    );
}

#[test]
fn a_listen_port_out_of_range_says_so() {
    let flags = Flags {
        listen: Some("127.0.0.1:99999".into()),
        ..Flags::default()
    };
    let err = build(None, &env(&[]), &flags).err().unwrap().to_string();
    assert!(
        err.ends_with("port 99999 is out of range (0 to 65535)"),
        "{err}"
    );
}

#[test]
fn a_misspelt_variable_is_answered_with_the_variable_to_use() {
    assert_eq!(
        err_of("", &[("MANNERLY_CONFG", "my.toml")]),
        "unknown key confg (environment variable MANNERLY_CONFG); did you mean MANNERLY_CONFIG?"
    );
    assert_eq!(
        err_of("", &[("MANNERLY_DATADIR", "/tmp/x")]),
        "unknown key datadir (environment variable MANNERLY_DATADIR); did you mean MANNERLY_DATA_DIR (data_dir)?"
    );
}

#[test]
fn every_error_of_a_file_is_said_at_once_in_file_order_in_plain_words() {
    let err = err_of(
        "[budget]\nstart_rate = \"x\"\nmax_rate = \"y\"\n[proxy]\nlisten = 5\n",
        &[("MANNERLY_BUDGET__BURST", "many")],
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines,
        [
            "budget.start_rate = \"x\" (my.toml line 2): invalid type: string \"x\", expected a number",
            "budget.max_rate = \"y\" (my.toml line 3): invalid type: string \"y\", expected a number",
            "proxy.listen = 5 (my.toml line 5): invalid type: integer `5`, expected host:port, e.g. 127.0.0.1:3128",
            "budget.burst = \"many\" (environment variable MANNERLY_BUDGET__BURST): invalid type: string \"many\", expected a whole number",
        ]
    );
}

#[test]
fn budget_groups_load_with_their_own_keys() {
    let loaded = build(
        Some((
            "[budget]\ngroup_by = \"ip\"\n[budget.groups.cdn]\nhosts = [\"*.cdn.example\"]\naddresses = [\"192.0.2.0/24\"]\nmax_rate = 4.0\nconcurrency = 3\n",
            "my.toml",
        )),
        &[],
        &Flags::default(),
    )
    .unwrap();
    let b = &loaded.config.budget;
    assert_eq!(b.group_by, mannerly_policy::site::GroupBy::Ip);
    assert_eq!(b.groups["cdn"].hosts, ["*.cdn.example"]);
    assert_eq!(b.for_host("group:cdn").concurrency, 3);
    let err = err_of("[budget.groups.cdn]\nhostz = [\"a.example\"]\n", &[]);
    assert!(err.contains("budget.groups.cdn.hostz"), "{err}");
    let err = err_of(
        "[budget.groups.a]\nhosts = [\"*.example.com\"]\n[budget.groups.b]\nhosts = [\"www.example.com\"]\n",
        &[],
    );
    assert!(
        err.contains("budget.groups.\"a\"") && err.contains("budget.groups.\"b\""),
        "{err}"
    );
}
