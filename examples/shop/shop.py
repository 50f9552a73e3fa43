"""A small shop on the whole Flask stack, with pgbus running each order.

Flask-SQLAlchemy holds the users and orders, Flask-Login signs people in,
Flask-WTF guards the shop's forms, and ``OrderWorkflow`` charges, marks paid and
ships every order: started in the same transaction as the order, run by
``pgbus-worker``, fixed by operators in the dashboard at /pgbus. See README.md.
"""

from __future__ import annotations

import os
from decimal import Decimal, InvalidOperation
from typing import Any

import click
from flask import Blueprint, Flask, Request, abort, flash, redirect, render_template, request, url_for
from flask_login import LoginManager, UserMixin, current_user, login_required, login_user, logout_user
from flask_sqlalchemy import SQLAlchemy
from flask_wtf.csrf import CSRFProtect
from sqlalchemy import ForeignKey, Numeric, String, select
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from werkzeug.exceptions import Forbidden
from werkzeug.security import check_password_hash, generate_password_hash

from pgbus_flask import PgBus, Workflow, step


class Base(DeclarativeBase):
    pass


db = SQLAlchemy(model_class=Base)
login_manager = LoginManager()
bus = PgBus()
shop = Blueprint("shop", __name__, cli_group=None)  # its commands: flask init-db, flask add-user


class User(UserMixin, db.Model):
    __tablename__ = "shop_users"
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(200), unique=True)
    password_hash: Mapped[str] = mapped_column(String(200))
    is_operator: Mapped[bool] = mapped_column(default=False)  # may use the pgbus dashboard


class Order(db.Model):
    __tablename__ = "shop_orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey(User.id))
    amount: Mapped[Decimal] = mapped_column(Numeric(10, 2))
    status: Mapped[str] = mapped_column(String(20), default="placed")  # placed, paid, shipped
    charge_id: Mapped[str | None] = mapped_column(String(100))


# -- the workflow ----------------------------------------------------------------------------

REVIEW_LIMIT = Decimal("1000")


class PaymentDeclined(Exception):
    pass


def charge_card(amount: Decimal, idempotency_key: str, first_try: bool) -> str:
    """A stand-in for a payment provider: its fraud check declines an amount over REVIEW_LIMIT
    the first time, and lets it through once someone has checked with the customer."""
    if amount > REVIEW_LIMIT and first_try:
        raise PaymentDeclined(f"{amount} is over {REVIEW_LIMIT}: held for review. Call the customer, then resume.")
    return f"ch_{idempotency_key[:12]}"


class OrderWorkflow(Workflow):
    """Charge, mark paid, ship. A declined charge pauses the run (the default ``on_error``)
    until an operator resumes it from the dashboard, which retries the charge."""

    workflow_name = "ShopOrder"  # the name runs are stored under: the class may be renamed later
    queue = "shop"

    @step
    def charge(self) -> str:
        # An outside service: the run's id as idempotency key makes a repeated delivery charge once.
        return charge_card(self.kwargs["amount"], str(self.workflow_id), first_try=self.attempt == 1)

    @step(transactional=True)
    def mark_paid(self) -> None:
        # self.session's writes commit exactly when this step is recorded done, so they happen once.
        order = self.session.get(Order, self.kwargs["order_id"])
        order.status, order.charge_id = "paid", self.output_of("charge")

    @step(transactional=True)
    def ship(self) -> None:
        self.session.get(Order, self.kwargs["order_id"]).status = "shipped"


def place_order(user: User, amount: Decimal) -> Order:
    """Write the order and start its run in the session's transaction: they commit together or not
    at all, and the first step job is sent only after the commit."""
    order = Order(user_id=user.id, amount=amount)
    db.session.add(order)
    db.session.flush()  # gives the order its id
    OrderWorkflow.start(order_id=order.id, amount=amount, subject=("Order", order.id), session=db.session)
    return order


# -- who may do what -------------------------------------------------------------------------


@login_manager.user_loader
def load_user(user_id: str) -> User | None:
    return db.session.get(User, int(user_id))


def dashboard_operator(request: Request) -> str | None:
    """PGBUS_DASHBOARD_AUTH: signed-in operators act as ``dashboard:<their id>``."""
    if not current_user.is_authenticated:
        return None  # 401: sign in first
    if not current_user.is_operator:
        raise Forbidden("Only operators may open the pgbus dashboard.")
    return str(current_user.get_id())


# -- pages and commands ----------------------------------------------------------------------


@shop.get("/")
@login_required
def orders() -> str:
    mine = db.session.scalars(select(Order).filter_by(user_id=current_user.id).order_by(Order.id.desc()))
    return render_template("orders.html", orders=mine, review_limit=REVIEW_LIMIT)


@shop.post("/orders")
@login_required
def new_order() -> Any:
    try:
        amount = Decimal(request.form.get("amount", "")).quantize(Decimal("0.01"))
        valid = 0 < amount < 10**8
    except InvalidOperation:
        valid = False
    if not valid:
        abort(400, "The amount must be a number from 0.01 to 99999999.99.")
    placed = place_order(current_user, amount)
    db.session.commit()  # the order and its run, then the first step job
    flash(f"Order {placed.id} placed.")
    return redirect(url_for(".orders"))


@shop.route("/login", methods=["GET", "POST"])
def login() -> Any:
    if request.method == "POST":
        user = db.session.scalar(select(User).filter_by(email=request.form.get("email", "")))
        if user is not None and check_password_hash(user.password_hash, request.form.get("password", "")):
            login_user(user)
            return redirect(url_for(".orders"))
        flash("Wrong email or password.")
    return render_template("login.html")


@shop.post("/logout")
def logout() -> Any:
    logout_user()
    return redirect(url_for(".login"))


@shop.cli.command("init-db")
def init_db() -> None:
    """Create the shop's tables (pgbus's own come from: flask pgbus migrate)."""
    db.create_all()
    click.echo("Created the shop's tables.")


@shop.cli.command("add-user")
@click.argument("email")
@click.option("--operator", is_flag=True, help="May use the pgbus dashboard.")
@click.password_option()
def add_user(email: str, operator: bool, password: str) -> None:
    """Add a user who can sign in (an operator also opens /pgbus)."""
    user = User(email=email, password_hash=generate_password_hash(password), is_operator=operator)
    db.session.add(user)
    db.session.commit()
    click.echo(f"Added {'operator' if operator else 'user'} {email} (id {user.id}).")


def create_app(config: dict[str, Any] | None = None) -> Flask:
    app = Flask(__name__)
    app.config.from_mapping(
        PGBUS_DATABASE_URL=os.environ.get("PGBUS_DATABASE_URL", "postgresql:///shop"),
        PGBUS_REDIS_URL=os.environ.get("PGBUS_REDIS_URL", "redis://localhost:6379/0"),
        PGBUS_DASHBOARD_AUTH=dashboard_operator,
        SESSION_COOKIE_SAMESITE="Lax",
    )
    app.config.from_prefixed_env()  # FLASK_SECRET_KEY: signs the sign-in cookie and every form
    app.config.update(config or {})
    # The orders live in pgbus's database, so an order and its run commit together.
    url = app.config["PGBUS_DATABASE_URL"]
    app.config["SQLALCHEMY_DATABASE_URI"] = url.replace("postgresql://", "postgresql+psycopg://", 1)
    db.init_app(app)
    login_manager.init_app(app)
    login_manager.login_view = "shop.login"
    CSRFProtect(app)  # the shop's forms; the dashboard's carry a token of its own
    bus.init_app(app)  # the dashboard at /pgbus and the flask pgbus commands
    app.register_blueprint(shop)
    return app
