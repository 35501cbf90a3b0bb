//! Access control: which routes need a bearer token, and whether a request holds one.
//!
//! [`role_of`] is the one rule that says which routes are guarded: reading routes (GET,
//! and the repository index, which only lists) are open; the inference routes need an
//! inference token; every other route changes the server's state and needs an admin
//! token, so a new state-changing route is guarded without being listed. An admin token
//! is accepted for inference too. A list that is not configured leaves its routes open.
//!
//! Tokens are compared in constant time (`subtle`), and neither the configured tokens
//! nor the one a request presents are ever logged or echoed in an answer.
//!
//! The guard runs before routing, so a route's pattern costs a second resolution of the
//! path (a regular expression per route tried). It is resolved only when it can change
//! the verdict: never when no token is configured (the common case, and the benchmark's),
//! never for a reading method; once for any other request while tokens are configured.

use std::future::Future;
use std::sync::Arc;

use actix_web::dev::{Service, ServiceRequest, ServiceResponse};
use actix_web::http::{header, Method};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use super::metrics::Metrics;
use crate::config::{AuthConfig, Role, Token};

/// The role a route needs, from its method and its route pattern (`None`: no route
/// matched; the answer is a 404 that reveals nothing and changes nothing, so it is open).
/// `pattern` resolves the route, and is called only when the method does not decide.
pub fn role_of<P: AsRef<str>>(
    method: &Method,
    pattern: impl FnOnce() -> Option<P>,
) -> Option<Role> {
    if method == Method::GET || method == Method::HEAD {
        return None;
    }
    match pattern()?.as_ref() {
        "/v2/repository/index" => None,
        p if p.ends_with("/infer") => Some(Role::Infer),
        _ => Some(Role::Admin),
    }
}

/// The configured tokens of each role; `None`: the role's routes are open.
#[derive(Clone, Debug, Default)]
pub struct Access {
    admin: Option<Vec<Token>>,
    infer: Option<Vec<Token>>,
}

impl Access {
    /// Every route open.
    pub fn open() -> Self {
        Self::default()
    }

    /// The tokens of `[server.auth]`; an empty list is no list (its routes are open).
    pub fn from_config(auth: &AuthConfig) -> Self {
        let list = |tokens: &Option<Vec<Token>>| tokens.clone().filter(|t| !t.is_empty());
        Self {
            admin: list(&auth.admin_tokens),
            infer: list(&auth.infer_tokens),
        }
    }

    /// Whether every route is open (no list configured): nothing for the guard to decide.
    pub fn is_open(&self) -> bool {
        self.admin.is_none() && self.infer.is_none()
    }

    /// Whether `authorization` (the request's header, or a gRPC call's metadata of that
    /// name) lets it use a route of `role`.
    pub fn check(&self, role: Role, authorization: Option<&[u8]>) -> Result<(), ApiError> {
        let accepted: Vec<&Token> = match role {
            Role::Admin => match &self.admin {
                Some(admin) => admin.iter().collect(),
                None => return Ok(()),
            },
            Role::Infer => match &self.infer {
                Some(infer) => infer.iter().chain(self.admin.iter().flatten()).collect(),
                None => return Ok(()),
            },
        };
        let presented = authorization
            .and_then(bearer)
            .ok_or(ApiError::Unauthorized { role })?;
        // Every token is compared, whichever matches, so the time taken does not say
        // which one did (only a length differing from all of them is quicker to tell).
        let matched = accepted.iter().fold(subtle::Choice::from(0), |any, token| {
            any | token.expose().ct_eq(presented)
        });
        if bool::from(matched) {
            Ok(())
        } else {
            Err(ApiError::Forbidden { role })
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    const SCHEME: &[u8] = b"bearer ";
    if value.len() < SCHEME.len() || !value[..SCHEME.len()].eq_ignore_ascii_case(SCHEME) {
        return None;
    }
    let token = value[SCHEME.len()..].trim_ascii();
    (!token.is_empty()).then_some(token)
}

/// The middleware: passes a request on if its route is open or its token is accepted,
/// else answers 401 or 403 (counted in the metrics by kind) without calling the route.
pub fn guard<S, B>(
    access: &Access,
    metrics: &Arc<Metrics>,
    request: ServiceRequest,
    service: &S,
) -> impl Future<Output = Result<ServiceResponse<B>, actix_web::Error>>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error>,
{
    let role = if access.is_open() {
        None
    } else {
        role_of(request.method(), || request.match_pattern())
    };
    let verdict = match role {
        Some(role) => {
            let authorization = request.headers().get(header::AUTHORIZATION);
            access.check(role, authorization.map(|v| v.as_bytes()))
        }
        None => Ok(()),
    };
    let call = match verdict {
        Ok(()) => Ok(service.call(request)),
        Err(refusal) => {
            metrics.api_error(&refusal, None);
            Err(refusal)
        }
    };
    async move {
        match call {
            Ok(called) => called.await,
            Err(refusal) => Err(refusal.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Outcome;

    fn access() -> Access {
        Access::from_config(&AuthConfig {
            admin_tokens: Some(vec![Token::new("root")]),
            infer_tokens: Some(vec![Token::new("user"), Token::new("other")]),
        })
    }

    fn check(access: &Access, role: Role, header: Option<&str>) -> Option<Outcome> {
        let value = header.map(|h| header::HeaderValue::from_str(h).expect("header"));
        let bytes = value.as_ref().map(|v| v.as_bytes());
        access.check(role, bytes).err().map(|e| e.kind())
    }

    /// `role_of` with a route resolved already.
    fn role(method: &Method, pattern: Option<&str>) -> Option<Role> {
        role_of(method, || pattern)
    }

    #[test]
    fn only_reading_routes_are_open() {
        let post = Method::POST;
        assert_eq!(role(&Method::GET, Some("/v2/models/{model}")), None);
        assert_eq!(role(&post, Some("/v2/repository/index")), None);
        assert_eq!(role(&post, None), None);
        let infer = Some("/v2/models/{model}/versions/{version}/infer");
        assert_eq!(role(&post, infer), Some(Role::Infer));
        let load = Some("/v2/repository/models/{model}/load");
        assert_eq!(role(&post, load), Some(Role::Admin));
        assert_eq!(role(&Method::DELETE, Some("/anything")), Some(Role::Admin));
    }

    /// Mutation that breaks it: the pattern resolved before the method is looked at (as
    /// it was: a regular expression per reading request).
    #[test]
    fn a_reading_method_never_resolves_the_route() {
        let unresolved = || -> Option<&'static str> { panic!("the route was resolved") };
        assert_eq!(role_of(&Method::GET, unresolved), None);
        assert_eq!(role_of(&Method::HEAD, unresolved), None);
    }

    #[test]
    fn tokens_are_checked_per_role() {
        let a = access();
        assert_eq!(check(&a, Role::Infer, Some("Bearer user")), None);
        assert_eq!(check(&a, Role::Infer, Some("bearer  other ")), None);
        assert_eq!(check(&a, Role::Infer, Some("Bearer root")), None);
        assert_eq!(check(&a, Role::Admin, Some("Bearer root")), None);
        let forbidden = Some(Outcome::Forbidden);
        assert_eq!(check(&a, Role::Admin, Some("Bearer user")), forbidden);
        assert_eq!(check(&a, Role::Infer, Some("Bearer use")), forbidden);
        assert_eq!(check(&a, Role::Infer, Some("Bearer userx")), forbidden);
        let unauthorized = Some(Outcome::Unauthorized);
        assert_eq!(check(&a, Role::Infer, None), unauthorized);
        assert_eq!(check(&a, Role::Infer, Some("Basic user")), unauthorized);
        assert_eq!(check(&a, Role::Infer, Some("Bearer ")), unauthorized);
    }

    #[test]
    fn unconfigured_roles_are_open() {
        let admin_only = Access::from_config(&AuthConfig {
            admin_tokens: Some(vec![Token::new("root")]),
            infer_tokens: Some(vec![]),
        });
        assert_eq!(check(&admin_only, Role::Infer, None), None);
        assert_eq!(
            check(&admin_only, Role::Admin, None),
            Some(Outcome::Unauthorized)
        );
        assert_eq!(check(&Access::open(), Role::Admin, None), None);
        assert!(Access::open().is_open());
        assert!(
            !admin_only.is_open(),
            "one list configured guards its routes"
        );
    }
}
