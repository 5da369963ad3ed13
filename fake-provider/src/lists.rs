//! The vendors' APIs that take an address off their own suppression list, as their API
//! references give them (`campaign-sender suppress --lift-at-vendor`), over the fake's one list
//! ([`FakeProvider::suppressions`]): each checks the vendor's auth when a key is configured,
//! removes the address (any case) and answers in the vendor's words — lifted, or not listed
//! where the vendor says so.
//!
//! - SES v2 `DELETE /v2/email/suppression/addresses/{address}`: 200 `{}`; 404
//!   `NotFoundException`.
//! - SendGrid `DELETE /v3/suppression/bounces/{email}`: 204; 404.
//! - Postmark `POST /message-streams/{stream}/suppressions/delete`: 200 with each address's
//!   `Status` (`Deleted`; `Failed` for a `SpamComplaint` listing, which Postmark never deletes).
//! - Mailgun `DELETE /v3/{domain}/bounces/{address}`: 200; 404 "Address not found in bounces
//!   table".
//! - Resend `DELETE /suppressions/{email}`: 200; 404.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::vendors::Contract;
use crate::FakeProvider;

pub fn routes() -> Router<Arc<FakeProvider>> {
    Router::new()
        .route("/v2/email/suppression/addresses/{address}", delete(ses))
        .route("/v3/suppression/bounces/{email}", delete(sendgrid))
        .route(
            "/message-streams/{stream}/suppressions/delete",
            post(postmark),
        )
        .route("/v3/{domain}/bounces/{address}", delete(mailgun))
        .route("/suppressions/{email}", delete(resend))
}

/// The vendor's 401 when a key is configured and the request does not carry it.
fn unauthorized(p: &FakeProvider, contract: Contract, headers: &HeaderMap) -> Option<Response> {
    let key = p.cfg.api_key.as_deref()?;
    (!contract.authorized(headers, key)).then(|| contract.refused(401))
}

async fn ses(
    State(p): State<Arc<FakeProvider>>,
    headers: HeaderMap,
    Path(address): Path<String>,
) -> Response {
    if let Some(no) = unauthorized(&p, Contract::Ses, &headers) {
        return no;
    }
    if p.unsuppress(&address) {
        Json(json!({})).into_response()
    } else {
        let mut r = (
            StatusCode::NOT_FOUND,
            Json(json!({"message": "Email address does not exist on your suppression list."})),
        )
            .into_response();
        r.headers_mut().insert(
            "x-amzn-errortype",
            "NotFoundException".parse().expect("a header value"),
        );
        r
    }
}

async fn sendgrid(
    State(p): State<Arc<FakeProvider>>,
    headers: HeaderMap,
    Path(email): Path<String>,
) -> Response {
    if let Some(no) = unauthorized(&p, Contract::Sendgrid, &headers) {
        return no;
    }
    if p.unsuppress(&email) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        (
            StatusCode::NOT_FOUND,
            Json(json!({"errors": [{"field": null, "message": "Email does not exist"}]})),
        )
            .into_response()
    }
}

async fn postmark(
    State(p): State<Arc<FakeProvider>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if let Some(no) = unauthorized(&p, Contract::Postmark, &headers) {
        return no;
    }
    let entries = body["Suppressions"].as_array().cloned().unwrap_or_default();
    let answers: Vec<Value> = entries
        .iter()
        .filter_map(|e| e["EmailAddress"].as_str())
        .map(|email| {
            let complaint = p.listed_for(email).as_deref() == Some("SpamComplaint");
            if complaint {
                json!({"EmailAddress": email, "Status": "Failed", "Message": "You do not have the required authority to change this suppression."})
            } else {
                p.unsuppress(email);
                json!({"EmailAddress": email, "Status": "Deleted", "Message": null})
            }
        })
        .collect();
    Json(json!({"Suppressions": answers})).into_response()
}

async fn mailgun(
    State(p): State<Arc<FakeProvider>>,
    headers: HeaderMap,
    Path((_domain, address)): Path<(String, String)>,
) -> Response {
    if let Some(no) = unauthorized(&p, Contract::Mailgun, &headers) {
        return no;
    }
    if p.unsuppress(&address) {
        Json(json!({"message": "Bounced address has been removed", "address": address}))
            .into_response()
    } else {
        (
            StatusCode::NOT_FOUND,
            Json(json!({"message": "Address not found in bounces table"})),
        )
            .into_response()
    }
}

async fn resend(
    State(p): State<Arc<FakeProvider>>,
    headers: HeaderMap,
    Path(email): Path<String>,
) -> Response {
    if let Some(no) = unauthorized(&p, Contract::Resend, &headers) {
        return no;
    }
    if p.unsuppress(&email) {
        Json(json!({"object": "suppression", "id": "fake-suppression", "deleted": true}))
            .into_response()
    } else {
        (
            StatusCode::NOT_FOUND,
            Json(
                json!({"statusCode": 404, "name": "not_found", "message": "Suppression not found"}),
            ),
        )
            .into_response()
    }
}
