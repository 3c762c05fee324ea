"""The dashboard in a real headless Chromium (Debian's chromium and chromedriver, via Selenium):
a group appears when a consumer joins, its page shows the member's assignment, and the lag shown
follows what is produced and committed.

Set DASHBOARD_SCREENSHOTS=DIR to save the pages as PNG (docs/images/ comes from this)."""

import os
import shutil
import time

import pytest
from confluent_kafka import Consumer, Producer
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from cohort_testing import ServerProcess

pytestmark = pytest.mark.e2e

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("dashboard")
    srv = ServerProcess(base / "data", "http.listener=127.0.0.1:0", "num.partitions=4",
                        log_path=str(base / "server.log")).start()
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def browser():
    assert CHROMIUM and CHROMEDRIVER, "make test installs Debian's chromium and chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1280,900"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    yield driver
    driver.quit()


def _shot(driver, name):
    folder = os.environ.get("DASHBOARD_SCREENSHOTS")
    if folder:
        driver.save_screenshot(os.path.join(folder, name))


def _text(driver, css):
    """The text of the first match, or None. The page re-renders every 2 s, so an element found
    a moment ago may be gone: a stale element reads as not there yet (waits try again)."""
    try:
        found = driver.find_elements(By.CSS_SELECTOR, css)
        return found[0].text if found else None
    except StaleElementReferenceException:
        return None


def _click(driver, css):
    try:
        found = driver.find_elements(By.CSS_SELECTOR, css)
        if found:
            found[0].click()
            return True
    except StaleElementReferenceException:
        pass
    return False


def test_groups_members_and_lag_live(broker, browser):
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(40):
        producer.produce("orders", b"v%d" % i, partition=i % 4)
    producer.flush(10)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "dash-group", "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, "client.id": "dash-client"})
    try:
        consumer.subscribe(["orders"])
        seen, deadline = 0, time.monotonic() + 30
        while seen < 40 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                seen += 1
        assert seen == 40
        consumer.commit(asynchronous=False)

        wait = WebDriverWait(browser, 20, poll_frequency=0.2, ignored_exceptions=(StaleElementReferenceException,))
        browser.get(f"http://127.0.0.1:{broker.http_port}/")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-group="dash-group"]'))
        wait.until(lambda d: _text(d, 'tr[data-group="dash-group"] .state') == "Stable")
        wait.until(lambda d: _text(d, 'tr[data-group="dash-group"] .members') == "1")
        wait.until(lambda d: _text(d, 'tr[data-group="dash-group"] .lag') == "0")

        # The filters narrow the table and survive the refresh.
        wait.until(lambda d: Select(d.find_element(By.ID, "filter-type")).select_by_value("classic") or True)
        wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, 'tr[data-group="dash-group"]'))
        wait.until(lambda d: Select(d.find_element(By.ID, "filter-type")).select_by_value("consumer") or True)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-group="dash-group"]'))
        _shot(browser, "dashboard-groups.png")

        wait.until(lambda d: _click(d, 'tr[data-group="dash-group"]'))
        wait.until(lambda d: _text(d, "#group-title") == "dash-group")
        assigned = wait.until(lambda d: _text(d, "tr[data-member] .assigned"))
        assert assigned == "orders-0, orders-1, orders-2, orders-3"
        assert wait.until(lambda d: _text(d, "tr[data-member] .target")) == assigned
        assert "dash-client" in wait.until(lambda d: _text(d, "tr[data-member]"))
        assert browser.find_elements(By.CSS_SELECTOR, "#timeline circle")  # the epoch it joined at

        # Produce without consuming: the page's lag follows within a refresh.
        for i in range(7):
            producer.produce("orders", b"more", partition=2)
        producer.flush(10)
        wait.until(lambda d: _text(d, 'tr[data-partition="orders-2"] .lag') == "7")
        wait.until(lambda d: _text(d, 'tr[data-partition="orders-0"] .lag') == "0")
        _shot(browser, "dashboard-group.png")

        browser.get(f"http://127.0.0.1:{broker.http_port}/#/topics")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-partition="orders-2"]'))
        wait.until(lambda d: "17" in (_text(d, 'tr[data-partition="orders-2"]') or ""))  # 10 + 7 records
        _shot(browser, "dashboard-topics.png")

        browser.get(f"http://127.0.0.1:{broker.http_port}/#/group/no-such-group")
        wait.until(lambda d: _text(d, "#group-missing") == "Consumer group 'no-such-group' does not exist.")
    finally:
        consumer.close()


def test_share_groups_page(broker, browser):
    from confluent_kafka import ShareConsumer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ResourceType.GROUP, "dash-queue", incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(20)
    del admin
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(12):
        producer.produce("jobs", b"j%d" % i, partition=0)
    producer.flush(10)
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "dash-queue",
                              "share.acknowledgement.mode": "explicit", "client.id": "dash-worker"})
    try:
        consumer.subscribe(["jobs"])
        got, deadline = [], time.monotonic() + 30
        while len(got) < 12 and time.monotonic() < deadline:
            got += [m for m in consumer.poll(0.5) or [] if m.error() is None]
        assert len(got) == 12
        for m in got[:8]:  # 8 done, 4 still held
            consumer.acknowledge(m)
        consumer.commit_sync()

        wait = WebDriverWait(browser, 20, poll_frequency=0.2, ignored_exceptions=(StaleElementReferenceException,))
        browser.get(f"http://127.0.0.1:{broker.http_port}/#/share")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, 'section[data-share-group="dash-queue"]'))
        assert "dash-worker" in wait.until(lambda d: _text(d, 'section[data-share-group="dash-queue"] tr[data-member]'))
        row = 'section[data-share-group="dash-queue"] tr[data-share-partition="jobs-0"]'
        wait.until(lambda d: _text(d, row + " .acquired") == "4")
        assert _text(browser, row + " .in-flight") == "4" and _text(browser, row + " .lag") == "4"
        _shot(browser, "dashboard-share.png")
    finally:
        consumer.close()
