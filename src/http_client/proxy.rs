//! Which proxy, if any, an outbound call goes through: `HTTPS_PROXY`, `HTTP_PROXY` and
//! `NO_PROXY` (or their lower-case forms), read as the cluster's other operators read them.
//!
//! OpenShift hands its cluster-wide proxy (`proxies.config.openshift.io/cluster`, its status) to
//! operators as those three upper-case variables: OLM injects them into every operator Deployment
//! (operator-framework/operator-lifecycle-manager, pkg/lib/proxy/envvar.go `ToEnvVar`, used by
//! pkg/controller/operators/olm/overrides/initializer.go, master at 992bb09). Its `noProxy` is
//! written for Go clients — the Machine Config Operator's included: its EC2 client's transport
//! takes `http.ProxyFromEnvironment` (vendored aws-sdk-go-v2, aws/transport/http/client.go) and
//! its vCenter client copies `http.DefaultTransport`'s (vendored govmomi, vim25/soap/client.go;
//! both at 7ff337a) — so it is read by the rules of Go's
//! golang.org/x/net/http/httpproxy (proxy.go, `FromEnvironment`, `config.init`, `useProxy`,
//! master at 0ca694d), not curl's: entries are separated by commas; `*` alone turns the proxy off;
//! an IP or CIDR matches addresses written as IPs; `example.com` matches it and its subdomains
//! while `.example.com` and `*.example.com` match subdomains only; any entry may end in `:port`;
//! and `localhost` and loopback IPs never go through a proxy. The network operator writes the
//! merged list (openshift/cluster-network-operator, pkg/util/proxyconfig/no_proxy.go
//! `MergeUserSystemNoProxy` at 2a6a57f): the administrator's entries plus `.svc`,
//! `.cluster.local`, `localhost`, `127.0.0.1`, the API server's internal name and the machine,
//! service and cluster networks (CIDRs).

use std::fmt;
use std::net::IpAddr;

use base64::Engine as _;
use hyper::Uri;
use hyper::header::HeaderValue;

/// A proxy: where it listens, and the `Proxy-Authorization` the user info of its URL makes.
#[derive(Clone)]
pub struct Proxy {
    /// `scheme://host:port` without the user info: the only form ever shown (logs, errors,
    /// conditions), so a password in the URL is never written anywhere.
    pub uri: Uri,
    pub authorization: Option<HeaderValue>,
}

impl fmt::Display for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = self.uri.scheme_str().unwrap_or("http");
        let authority = self.uri.authority().map(|a| a.as_str()).unwrap_or_default();
        write!(f, "{scheme}://{authority}")
    }
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let credentials = if self.authorization.is_some() {
            " (with credentials)"
        } else {
            ""
        };
        write!(f, "{self}{credentials}")
    }
}

impl Proxy {
    /// The proxy of a variable's value, as Go's `parseProxy` reads it (a value without a scheme
    /// is taken as `http://`); `None` for one that is no URL with a host.
    pub fn parse(value: &str) -> Option<Proxy> {
        let value = value.trim();
        let with_scheme = if value.contains("://") {
            value.to_string()
        } else {
            format!("http://{value}")
        };
        let uri: Uri = with_scheme.parse().ok()?;
        let authority = uri.authority()?.as_str();
        let (userinfo, host_port) = match authority.rsplit_once('@') {
            Some((userinfo, host_port)) => (Some(userinfo), host_port),
            None => (None, authority),
        };
        let authorization = userinfo.map(|userinfo| {
            let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8_lossy()
                    .into_owned()
            };
            let token = base64::engine::general_purpose::STANDARD.encode(format!(
                "{}:{}",
                decode(user),
                decode(password)
            ));
            let mut header = HeaderValue::from_str(&format!("Basic {token}")).ok()?;
            header.set_sensitive(true);
            Some(header)
        });
        let uri = Uri::builder()
            .scheme(uri.scheme_str()?)
            .authority(host_port)
            .path_and_query("/")
            .build()
            .ok()
            .filter(|u| u.host().is_some_and(|h| !h.is_empty()))?;
        Some(Proxy {
            uri,
            authorization: authorization.flatten(),
        })
    }
}

/// The proxies of the environment and the destinations that bypass them.
#[derive(Clone, Debug, Default)]
pub struct Proxies {
    http: Option<Proxy>,
    https: Option<Proxy>,
    no_proxy: NoProxy,
}

impl Proxies {
    /// From the values of `HTTP_PROXY`, `HTTPS_PROXY` and `NO_PROXY`. A proxy variable that is
    /// set but unusable is named in the warning (never its value, which may hold a password).
    pub fn new(http: &str, https: &str, no_proxy: &str) -> Proxies {
        let parse = |name: &str, value: &str| {
            let proxy = Proxy::parse(value);
            if proxy.is_none() && !value.trim().is_empty() {
                tracing::warn!("{name} is not a proxy URL; those calls are made without a proxy");
            }
            proxy
        };
        Proxies {
            http: parse("HTTP_PROXY", http),
            https: parse("HTTPS_PROXY", https),
            no_proxy: NoProxy::parse(no_proxy),
        }
    }

    /// From this process's environment: the upper-case name first, then the lower-case one, an
    /// empty value counting as unset (Go's `getEnvAny`).
    pub fn from_env() -> Proxies {
        let any = |names: [&str; 2]| {
            (names.iter())
                .find_map(|n| std::env::var(n).ok().filter(|v| !v.is_empty()))
                .unwrap_or_default()
        };
        let proxies = Proxies::new(
            &any(["HTTP_PROXY", "http_proxy"]),
            &any(["HTTPS_PROXY", "https_proxy"]),
            &any(["NO_PROXY", "no_proxy"]),
        );
        if proxies.http.is_some() || proxies.https.is_some() {
            // Debug shows the proxies without their credentials.
            tracing::info!(?proxies, "calls beyond the API server go through the proxy");
        }
        proxies
    }

    /// The proxy a call to `uri` goes through (Go's `proxyForURL`): chosen by the scheme, unless
    /// `NO_PROXY` names the destination.
    pub fn for_uri(&self, uri: &Uri) -> Option<&Proxy> {
        let (proxy, default_port) = match uri.scheme_str()? {
            "https" => (self.https.as_ref()?, 443),
            "http" => (self.http.as_ref()?, 80),
            _ => return None,
        };
        let port = uri.port_u16().unwrap_or(default_port);
        (!self.no_proxy.bypasses(uri.host()?, port)).then_some(proxy)
    }
}

#[derive(Clone, Debug, Default)]
struct NoProxy {
    everything: bool,
    entries: Vec<Entry>,
}

#[derive(Clone, Debug, PartialEq)]
enum Entry {
    Network(IpAddr, u8),
    Ip(IpAddr, Option<u16>),
    /// `suffix` starts with a dot; `exact`: the domain itself matches too (written without one).
    Domain {
        suffix: String,
        exact: bool,
        port: Option<u16>,
    },
}

impl NoProxy {
    fn parse(list: &str) -> NoProxy {
        let mut no_proxy = NoProxy::default();
        for entry in list.split(',').map(|e| e.trim().to_ascii_lowercase()) {
            if entry == "*" {
                return NoProxy {
                    everything: true,
                    entries: Vec::new(),
                };
            }
            no_proxy.entries.extend(Entry::parse(&entry));
        }
        no_proxy
    }

    fn bypasses(&self, host: &str, port: u16) -> bool {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let ip = host.parse::<IpAddr>().ok().map(|ip| ip.to_canonical());
        if host == "localhost" || ip.is_some_and(|ip| ip.is_loopback()) || self.everything {
            return true;
        }
        let port_matches = |p: &Option<u16>| p.is_none_or(|p| p == port);
        self.entries.iter().any(|entry| match (entry, ip) {
            (Entry::Network(net, bits), Some(ip)) => in_network(ip, *net, *bits),
            (Entry::Ip(addr, p), Some(ip)) => *addr == ip && port_matches(p),
            (
                Entry::Domain {
                    suffix,
                    exact,
                    port,
                },
                None,
            ) => {
                (host.ends_with(suffix.as_str()) || (*exact && host == suffix[1..]))
                    && port_matches(port)
            }
            _ => false,
        })
    }
}

impl Entry {
    fn parse(entry: &str) -> Option<Entry> {
        if let Some((addr, bits)) = entry.split_once('/')
            && let (Ok(addr), Ok(bits)) = (addr.parse::<IpAddr>(), bits.parse::<u8>())
            && bits <= if addr.is_ipv4() { 32 } else { 128 }
        {
            return Some(Entry::Network(addr.to_canonical(), bits));
        }
        // Go's net.SplitHostPort: `[v6]:port`, or `host:port` with a single colon.
        let (host, port) =
            if let Some((v6, port)) = entry.strip_prefix('[').and_then(|e| e.split_once("]:")) {
                (v6, Some(port))
            } else if entry.matches(':').count() == 1 {
                let (host, port) = entry.split_once(':')?;
                (host, Some(port))
            } else {
                (entry, None)
            };
        // A port that is no number matches no destination (Go compares it as text).
        let port = match port {
            Some(p) => Some(p.parse::<u16>().ok()?),
            None => None,
        };
        if host.is_empty() {
            return None;
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Some(Entry::Ip(ip.to_canonical(), port));
        }
        let host = host
            .strip_prefix('*')
            .filter(|h| h.starts_with('.'))
            .unwrap_or(host);
        let exact = !host.starts_with('.');
        let suffix = if exact {
            format!(".{host}")
        } else {
            host.to_string()
        };
        Some(Entry::Domain {
            suffix,
            exact,
            port,
        })
    }
}

fn in_network(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROXY: &str = "http://proxy.corp:3128";

    /// Whether a call to `url` goes through the proxy with `NO_PROXY=no_proxy`.
    fn proxied(no_proxy: &str, url: &str) -> bool {
        let proxies = Proxies::new(PROXY, PROXY, no_proxy);
        proxies.for_uri(&url.parse().unwrap()).is_some()
    }

    #[test]
    fn no_proxy_reads_as_gos_httpproxy() {
        // (NO_PROXY, URL, proxied) — the cases of httpproxy's proxy_test.go that OpenShift's lists
        // exercise, and the entries the network operator adds.
        let cases = [
            ("", "https://ec2.us-east-1.amazonaws.com/", true),
            (
                "amazonaws.com",
                "https://ec2.us-east-1.amazonaws.com/",
                false,
            ),
            ("amazonaws.com", "https://amazonaws.com/", false),
            ("amazonaws.com", "https://notamazonaws.com/", true),
            (
                ".amazonaws.com",
                "https://ec2.us-east-1.amazonaws.com/",
                false,
            ),
            (".amazonaws.com", "https://amazonaws.com/", true),
            ("*.amazonaws.com", "https://amazonaws.com/", true),
            ("*.amazonaws.com", "https://sts.amazonaws.com/", false),
            ("VCenter.Corp", "https://vcenter.corp/sdk", false),
            ("vcenter.corp", "https://VCENTER.corp/sdk", false),
            ("*", "https://anything.example/", false),
            ("a.corp, *", "https://anything.example/", false),
            (" vcenter.corp ,,other", "https://vcenter.corp/sdk", false),
            // Ports: an entry with one matches that port only (the scheme's default counts).
            ("vcenter.corp:443", "https://vcenter.corp/sdk", false),
            ("vcenter.corp:8443", "https://vcenter.corp/sdk", true),
            ("vcenter.corp:8443", "https://vcenter.corp:8443/sdk", false),
            ("mirror.corp:80", "http://mirror.corp/rhcos.ova", false),
            // IPs and CIDRs match addresses written as IPs, never names.
            ("10.0.0.5", "https://10.0.0.5/sdk", false),
            ("10.0.0.5", "https://10.0.0.6/sdk", true),
            ("10.0.0.5:443", "https://10.0.0.5/sdk", false),
            ("10.0.0.5:8443", "https://10.0.0.5/sdk", true),
            ("10.0.0.0/16", "https://10.0.200.1/sdk", false),
            ("10.0.0.0/16", "https://10.1.0.1/sdk", true),
            ("10.0.0.0/8", "https://ten.corp/sdk", true),
            ("0.0.0.0/0", "https://192.0.2.1/", false),
            ("fd00::/8", "https://[fd00::1]/sdk", false),
            ("[fd00::1]:443", "https://[fd00::1]/sdk", false),
            ("fd00::1", "https://[fd00::2]/sdk", true),
            ("not a cidr/99", "https://10.0.0.1/", true),
            // Never proxied, whatever the list says (Go's useProxy).
            ("", "http://localhost:8080/", false),
            ("", "http://127.0.0.1:5000/", false),
            ("", "http://[::1]:5000/", false),
            // What the network operator adds on AWS.
            (
                ".svc,.cluster.local,.ec2.internal,169.254.169.254",
                "http://169.254.169.254/",
                false,
            ),
            (
                ".svc,.cluster.local,.ec2.internal",
                "https://ip-10-0-1-2.ec2.internal/",
                false,
            ),
            (
                ".svc,.cluster.local",
                "https://kubernetes.default.svc/",
                false,
            ),
        ];
        for (no_proxy, url, expected) in cases {
            assert_eq!(
                proxied(no_proxy, url),
                expected,
                "NO_PROXY={no_proxy:?} {url}"
            );
        }
    }

    #[test]
    fn the_scheme_chooses_the_proxy() {
        let only_https = Proxies::new("", PROXY, "");
        assert!(
            only_https
                .for_uri(&"https://a.example/".parse().unwrap())
                .is_some()
        );
        assert!(
            only_https
                .for_uri(&"http://a.example/".parse().unwrap())
                .is_none()
        );
        let only_http = Proxies::new("proxy.corp:3128", "", "");
        let proxy = only_http
            .for_uri(&"http://a.example/".parse().unwrap())
            .unwrap();
        assert_eq!(
            proxy.to_string(),
            "http://proxy.corp:3128",
            "no scheme reads as http://"
        );
        assert!(
            only_http
                .for_uri(&"https://a.example/".parse().unwrap())
                .is_none()
        );
        assert!(Proxies::new("::not a url", "", "").http.is_none());
    }

    #[test]
    fn credentials_in_a_proxy_url_are_sent_but_never_shown() {
        let proxies = Proxies::new("", "http://bic:s%40cret@proxy.corp:3128", "");
        let proxy = proxies
            .for_uri(&"https://ec2.example/".parse().unwrap())
            .unwrap();
        // base64("bic:s@cret"): the user info percent-decoded, as Go's url.UserPassword.
        assert_eq!(
            proxy.authorization.as_ref().unwrap(),
            "Basic YmljOnNAY3JldA=="
        );
        assert!(proxy.authorization.as_ref().unwrap().is_sensitive());
        for shown in [
            proxy.to_string(),
            format!("{proxy:?}"),
            format!("{proxies:?}"),
        ] {
            assert!(
                !shown.contains("cret") && !shown.contains("bic:"),
                "{shown}"
            );
            assert!(shown.contains("http://proxy.corp:3128"), "{shown}");
        }
    }
}
